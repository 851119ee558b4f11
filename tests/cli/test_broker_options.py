"""``magnetar broker`` and ``magnetar standalone`` start the same broker: they offer the same
broker options, declared once (:mod:`magnetar.cli.broker_options`)."""

from __future__ import annotations

import click

from magnetar.cli.broker_cmd import broker
from magnetar.cli.broker_options import BROKER_OPTION_NAMES
from magnetar.cli.standalone_cmd import standalone

CLUSTER_ONLY = {
    "--broker-id",
    "--overload-threshold-cpu-percent",
    "--function-worker-web-service-url",
}
"""A cluster broker's registration, its controller's threshold and the Functions Worker it
forwards to (a standalone has none: it runs its worker in-process)."""
STANDALONE_ONLY = {
    "--data-dir",
    "--bookie-port",
    "--bookie-write-cache-size-mb",
    "--bookie-gc-interval-ms",
    "--journal-skip-invalid-records",
    "--journal-reuse-files",
    "--functions-worker",
    "--functions-runtime",
}
"""The standalone's own parts: its data directory, in-process bookie and Functions Worker."""


def _options(command: click.Command) -> set[str]:
    ctx = click.Context(command)
    return {
        name
        for param in command.get_params(ctx)
        if isinstance(param, click.Option) and name_is_public(param)
        for name in param.opts
    }


def name_is_public(param: click.Option) -> bool:
    return not param.hidden and param.name != "help"


def test_both_commands_offer_the_same_broker_options() -> None:
    on_broker = _options(broker) - CLUSTER_ONLY
    on_standalone = _options(standalone) - STANDALONE_ONLY
    assert on_broker == on_standalone
    assert set(BROKER_OPTION_NAMES) <= on_broker
    # the options the issue found on the standalone only
    for name in (
        "--broker-max-connections",
        "--broker-max-connections-per-ip",
        "--partial-frame-bytes-max",
        "--partial-frame-timeout-ms",
        "--failover-delay-ms",
        "--https-port",
    ):
        assert name in on_broker, name


def test_the_help_texts_of_the_broker_options_are_the_same() -> None:
    ctx_b, ctx_s = click.Context(broker), click.Context(standalone)
    help_b = {p.opts[0]: p.help for p in broker.get_params(ctx_b) if isinstance(p, click.Option)}
    help_s = {
        p.opts[0]: p.help for p in standalone.get_params(ctx_s) if isinstance(p, click.Option)
    }
    for name in BROKER_OPTION_NAMES:
        assert help_b[name] == help_s[name], name
