"""The broker's inactive-topic settings as server flags (Pulsar's
``brokerDeleteInactiveTopics*``), part of the broker options both ``magnetar standalone``
and ``magnetar broker`` declare through :mod:`magnetar.cli.broker_options`; the rules are
:mod:`magnetar.broker.inactive_topics`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")

OPTIONS: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    (
        "broker_delete_inactive_topics_enabled",
        "delete_inactive_topics_enabled",
        click.option(
            "--broker-delete-inactive-topics-enabled/--no-broker-delete-inactive-topics-enabled",
            default=False,
            show_default=True,
            help="Delete topics inactive for the max duration (brokerDeleteInactiveTopicsEnabled; "
            "Pulsar's default is on). Namespace and topic inactive-topic policies override it.",
        ),
    ),
    (
        "broker_delete_inactive_topics_frequency_seconds",
        "delete_inactive_topics_frequency_s",
        click.option(
            "--broker-delete-inactive-topics-frequency-seconds",
            default=60,
            show_default=True,
            type=click.IntRange(min=1),
            help="How often topics are checked for inactivity "
            "(brokerDeleteInactiveTopicsFrequencySeconds).",
        ),
    ),
    (
        "broker_delete_inactive_topics_mode",
        "delete_inactive_topics_mode",
        click.option(
            "--broker-delete-inactive-topics-mode",
            default=MODES[0],
            show_default=True,
            type=click.Choice(MODES),
            help="Which topics without clients are inactive: those without subscriptions, or "
            "also those whose subscriptions acknowledged everything "
            "(brokerDeleteInactiveTopicsMode).",
        ),
    ),
    (
        "broker_delete_inactive_topics_max_inactive_duration_seconds",
        "delete_inactive_topics_max_inactive_duration_s",
        click.option(
            "--broker-delete-inactive-topics-max-inactive-duration-seconds",
            default=None,
            type=click.IntRange(min=0),
            help="How long a topic stays inactive before it is deleted "
            "(brokerDeleteInactiveTopicsMaxInactiveDurationSeconds; default: the frequency).",
        ),
    ),
)
"""(click parameter, ``BrokerConfig`` field, option)."""
