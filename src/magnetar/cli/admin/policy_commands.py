"""Policy commands shared by ``admin topics`` and ``admin namespaces``: each policy is one
:class:`Policy` row and becomes ``set-<name>``, ``get-<name>`` and ``remove-<name>`` on a
group, with pulsar-admin's flags. Paths are the REST's (``T/{retention,messageTTL,…}`` for a
topic, ``/admin/v2/namespaces/{tenant}/{ns}/{…}`` for a namespace).

A topic's ``get-<name>`` takes ``-ap``/``--applied``: the value in force (the topic's, else
the namespace's, else the broker's default) instead of the topic's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.admin.units import duration_s, size_bytes
from magnetar.cli.output import output_option, printer

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class Target:
    """What a group's policies belong to: its argument, its REST path and its name."""

    argument: Decorator
    path: Callable[[Any], str]
    label: Callable[[Any], str]
    applied: bool
    """Whether ``get-<name>`` takes ``--applied`` (topics only, as in Pulsar)."""


TOPIC_TARGET = Target(
    click.argument("target_value", metavar="TOPIC", type=TOPIC),
    lambda t: t.path if isinstance(t, Topic) else str(t),
    lambda t: t.full if isinstance(t, Topic) else str(t),
    applied=True,
)
NAMESPACE_TARGET = Target(
    click.argument("target_value", metavar="TENANT/NAMESPACE"),
    namespace_path,
    str,
    applied=False,
)


@dataclass(frozen=True, slots=True)
class Policy:
    """One single-value policy: ``name`` in the command names, ``rest`` the path suffix,
    ``options`` the flags of ``set-<name>``, ``body`` turns their values into the JSON body
    (``in_query``: the value goes in that query parameter instead, as ``messageTTL``)."""

    name: str
    rest: str
    what: str
    options: tuple[Decorator, ...]
    body: Callable[..., Any]
    in_query: str | None = None


def retention_body(size: str, time: str) -> dict[str, int]:
    """``--size``/``--time`` as Pulsar's ``RetentionPolicies`` JSON."""
    size_b, time_s = size_bytes(size), duration_s(time)
    return {
        "retentionTimeInMinutes": -1 if time_s < 0 else time_s // 60,
        "retentionSizeInMB": -1 if size_b < 0 else size_b // (1 << 20),
    }


def backlog_quota_body(limit: str | None, limit_time: str | None, policy: str) -> dict[str, Any]:
    """``--limit``/``--limitTime``/``--policy`` as Pulsar's ``BacklogQuota`` JSON."""
    if limit is None and limit_time is None:
        raise click.UsageError("give --limit or --limitTime")
    body: dict[str, Any] = {"policy": policy.lower()}
    if limit is not None:
        body["limitSize"] = size_bytes(limit)
    if limit_time is not None:
        body["limitTime"] = duration_s(limit_time)
    return body


def _persistence_body(
    bookkeeper_ensemble: int,
    bookkeeper_write_quorum: int,
    bookkeeper_ack_quorum: int,
    ml_mark_delete_max_rate: float,
) -> dict[str, Any]:
    return {
        "bookkeeperEnsemble": bookkeeper_ensemble,
        "bookkeeperWriteQuorum": bookkeeper_write_quorum,
        "bookkeeperAckQuorum": bookkeeper_ack_quorum,
        "managedLedgerMaxMarkDeleteRate": ml_mark_delete_max_rate,
    }


def _count(long: str, short: str, what: str) -> Decorator:
    return click.option(long, short, "value", required=True, type=click.IntRange(min=0), help=what)


RETENTION = Policy(
    "retention",
    "retention",
    "retention",
    (
        click.option("--size", "-s", required=True, help="Size: 10M, 2G, -1 (unlimited), 0."),
        click.option("--time", "-t", required=True, help="Time: 100m, 3h, 2d, -1, 0."),
    ),
    retention_body,
)
PERSISTENCE = Policy(
    "persistence",
    "persistence",
    "persistence",
    (
        click.option("--bookkeeper-ensemble", "-e", required=True, type=click.IntRange(min=1)),
        click.option("--bookkeeper-write-quorum", "-w", required=True, type=click.IntRange(min=1)),
        click.option("--bookkeeper-ack-quorum", "-a", required=True, type=click.IntRange(min=1)),
        click.option(
            "--ml-mark-delete-max-rate",
            "-r",
            default=0.0,
            show_default=True,
            type=float,
            help="Mark-delete operations per second at most (0: unlimited).",
        ),
    ),
    _persistence_body,
)


def inactive_topic_policies_body(
    enable: bool, disable: bool, max_inactive_duration: str, delete_mode: str
) -> dict[str, Any]:
    """The flags as Pulsar's ``InactiveTopicPolicies`` JSON (exactly one of -e and -d)."""
    if enable == disable:
        raise click.UsageError(
            "give either --enable-delete-while-inactive or --disable-delete-while-inactive"
        )
    seconds = duration_s(max_inactive_duration)
    if seconds < 0:
        raise click.BadParameter(
            f"{max_inactive_duration!r}: must be 0 or more", param_hint="'--max-inactive-duration'"
        )
    return {
        "deleteWhileInactive": enable,
        "maxInactiveDurationSeconds": seconds,
        "inactiveTopicDeleteMode": delete_mode,
    }


INACTIVE_TOPIC_POLICIES = Policy(
    "inactive-topic-policies",
    "inactiveTopicPolicies",
    "inactive topic policies",
    (
        click.option(
            "--enable-delete-while-inactive",
            "-e",
            "enable",
            is_flag=True,
            help="Delete the topics once inactive.",
        ),
        click.option(
            "--disable-delete-while-inactive",
            "-d",
            "disable",
            is_flag=True,
            help="Keep the topics however long they are inactive.",
        ),
        click.option(
            "--max-inactive-duration",
            "-t",
            required=True,
            help="How long a topic stays inactive before it is deleted: 60, 10m, 1h, 3d.",
        ),
        click.option(
            "--delete-mode",
            "-m",
            required=True,
            type=click.Choice(
                ["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]
            ),
            help="Inactive: no subscriptions, or every subscription caught up (and no clients).",
        ),
    ),
    inactive_topic_policies_body,
)
DEDUPLICATION_OPTION = click.option(
    "--enable/--disable", "-e/-d", "enable", required=True, default=None
)

TOPIC_POLICIES = (
    RETENTION,
    Policy(
        "message-ttl",
        "messageTTL",
        "message TTL",
        (click.option("--ttl", "-t", required=True, help="TTL: 3600, 60m, 1h, 0 (off)."),),
        lambda ttl: duration_s(ttl),
        in_query="messageTTL",
    ),
    PERSISTENCE,
    Policy(
        "deduplication",
        "deduplicationEnabled",
        "deduplication",
        (DEDUPLICATION_OPTION,),
        lambda enable: enable,
    ),
    Policy(
        "max-producers",
        "maxProducers",
        "producer limit",
        (_count("--max-producers", "-p", "Producers at most (0: unlimited)."),),
        lambda value: value,
    ),
    Policy(
        "max-consumers",
        "maxConsumers",
        "consumer limit",
        (_count("--max-consumers", "-c", "Consumers at most (0: unlimited)."),),
        lambda value: value,
    ),
    Policy(
        "max-consumers-per-subscription",
        "maxConsumersPerSubscription",
        "consumer limit per subscription",
        (_count("--max-consumers-per-subscription", "-c", "Consumers per subscription."),),
        lambda value: value,
    ),
    Policy(
        "max-unacked-messages-per-consumer",
        "maxUnackedMessagesOnConsumer",
        "unacknowledged message limit per consumer",
        (_count("--maxNum", "-m", "Unacknowledged messages per consumer."),),
        lambda value: value,
    ),
    Policy(
        "max-unacked-messages-per-subscription",
        "maxUnackedMessagesOnSubscription",
        "unacknowledged message limit per subscription",
        (_count("--maxNum", "-m", "Unacknowledged messages per subscription."),),
        lambda value: value,
    ),
    INACTIVE_TOPIC_POLICIES,
)
"""The policies of ``admin topics`` (topic level; the REST is :mod:`magnetar.admin.topic_policies`)."""


def _auto_topic_creation_body(
    enable: bool, topic_type: str, num_partitions: int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"allowAutoTopicCreation": enable, "topicType": topic_type}
    if num_partitions is not None:
        body["defaultNumPartitions"] = num_partitions
    return body


NAMESPACE_POLICIES = (
    PERSISTENCE,
    Policy(
        "max-producers-per-topic",
        "maxProducersPerTopic",
        "producer limit per topic",
        (_count("--max-producers-per-topic", "-p", "Producers per topic (0: unlimited)."),),
        lambda value: value,
    ),
    Policy(
        "max-consumers-per-topic",
        "maxConsumersPerTopic",
        "consumer limit per topic",
        (_count("--max-consumers-per-topic", "-c", "Consumers per topic (0: unlimited)."),),
        lambda value: value,
    ),
    Policy(
        "auto-topic-creation",
        "autoTopicCreation",
        "auto topic creation",
        (
            click.option("--enable/--disable", "-e/-d", "enable", required=True, default=None),
            click.option(
                "--type",
                "-t",
                "topic_type",
                default="non-partitioned",
                show_default=True,
                type=click.Choice(["partitioned", "non-partitioned"]),
            ),
            click.option("--num-partitions", "-n", type=click.IntRange(min=1), default=None),
        ),
        _auto_topic_creation_body,
    ),
    INACTIVE_TOPIC_POLICIES,
)
"""Namespace policies ``admin namespaces`` takes from this table (the older ones it spells
out itself)."""


def add_policy_commands(group: click.Group, target: Target, policy: Policy) -> None:
    """``set-``, ``get-`` and ``remove-<policy.name>`` on ``group``."""

    def set_(target_value: Any, **opts: Any) -> None:
        path = f"{target.path(target_value)}/{policy.rest}"
        value = policy.body(**opts)
        if policy.in_query is None:
            rest().post(path, value)
        else:
            rest().post(path, **{policy.in_query: value})
        label = target.label(target_value)
        printer().done(f"The {policy.what} of {label} set", target=label, value=value)

    def get(target_value: Any, applied: bool = False) -> None:
        path = f"{target.path(target_value)}/{policy.rest}"
        printer().result(rest().get(path, applied=True) if applied else rest().get(path))

    def remove(target_value: Any) -> None:
        rest().delete(f"{target.path(target_value)}/{policy.rest}")
        label = target.label(target_value)
        printer().done(f"The {policy.what} of {label} removed", target=label)

    setter: Callable[..., Any] = set_
    for option in reversed(policy.options):
        setter = option(setter)
    group.command(f"set-{policy.name}", help=f"Set the {policy.what}.")(
        target.argument(output_option(setter))
    )
    group.command(f"get-{policy.name}", help=f"Show the {policy.what}.")(
        target.argument(output_option(_applied_option(target, get)))
    )
    group.command(f"remove-{policy.name}", help=f"Remove the {policy.what}.")(
        target.argument(output_option(remove))
    )


def _applied_option(target: Target, command: Callable[..., Any]) -> Callable[..., Any]:
    if not target.applied:
        return command
    return click.option(
        "--applied", "-ap", is_flag=True, help="The value in force (namespace or broker)."
    )(command)


QUOTA_TYPES = click.Choice(["destination_storage", "message_age"], case_sensitive=False)
QUOTA_POLICIES = click.Choice(
    ["producer_request_hold", "producer_exception", "consumer_backlog_eviction"],
    case_sensitive=False,
)


def add_backlog_quota_commands(group: click.Group, target: Target) -> None:
    """``set-backlog-quota``, ``get-backlog-quotas`` and ``remove-backlog-quota``."""

    @group.command("set-backlog-quota")
    @target.argument
    @click.option("--limit", "-l", default=None, help="Size limit: 2G, 500M (destination_storage).")
    @click.option(
        "--limitTime", "-lt", "limit_time", default=None, help="Age limit: 3h (message_age)."
    )
    @click.option("--policy", "-p", required=True, type=QUOTA_POLICIES)
    @click.option("--type", "-t", "quota_type", type=QUOTA_TYPES, default="destination_storage",
                  show_default=True)  # fmt: skip
    @output_option
    def set_quota(
        target_value: Any, limit: str | None, limit_time: str | None, policy: str, quota_type: str
    ) -> None:
        """Limit the backlog of subscriptions, by size or by age."""
        body = backlog_quota_body(limit, limit_time, policy)
        path = f"{target.path(target_value)}/backlogQuota"
        rest().post(path, body, backlogQuotaType=quota_type.lower())
        label = target.label(target_value)
        printer().done(f"Backlog quota of {label} set", target=label, quota=body)

    def get_quotas(target_value: Any, applied: bool = False) -> None:
        """Show the backlog quotas, by type."""
        path = f"{target.path(target_value)}/backlogQuotaMap"
        printer().result(rest().get(path, applied=True) if applied else rest().get(path))

    group.command("get-backlog-quotas")(
        target.argument(output_option(_applied_option(target, get_quotas)))
    )

    @group.command("remove-backlog-quota")
    @target.argument
    @click.option("--type", "-t", "quota_type", type=QUOTA_TYPES, default="destination_storage",
                  show_default=True)  # fmt: skip
    @output_option
    def remove_quota(target_value: Any, quota_type: str) -> None:
        """Remove the backlog quota of one type."""
        path = f"{target.path(target_value)}/backlogQuota"
        rest().delete(path, backlogQuotaType=quota_type.lower())
        label = target.label(target_value)
        printer().done(f"Backlog quota of {label} removed", target=label)
