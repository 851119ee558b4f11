"""``magnetar admin topics ...``: topic lifecycle, stats and subscription operations.

Paths are Pulsar's REST v2 (``T`` = ``/admin/v2/{domain}/{tenant}/{ns}/{topic}``, §8.1).
Options mirror ``pulsar-admin topics``: ``-p`` partitions, ``-s`` subscription, ``-n``
count, ``-t`` time, ``-m`` message id, ``-f`` force. Topic-level policies
(``set-|get-|remove-retention``, ``…-message-ttl``, ``…-backlog-quota``, ``…-max-producers``,
…) come from :mod:`magnetar.cli.admin.policy_commands`.
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import quote

import click

from magnetar.cli.admin import replication, topic_offload
from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.admin.policy_commands import (
    TOPIC_POLICIES,
    TOPIC_TARGET,
    add_backlog_quota_commands,
    add_policy_commands,
)
from magnetar.cli.admin.process_status import poll_status
from magnetar.cli.admin.rest import AdminHttpError, RawResponse
from magnetar.cli.admin.units import duration_s
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import fail, output_option, printer

#: Java MessageId.latest / earliest as the REST API spells them.
LATEST = {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1, "partitionIndex": -1}
EARLIEST = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
PEEK_MAX = 1000
COMPACTION_POLL_INTERVAL_S = 0.2

TOPIC_ARG = click.argument("topic", type=TOPIC)
SUBSCRIPTION = click.option("--subscription", "-s", required=True, help="Subscription name.")


def _sub(topic: Topic, subscription: str) -> str:
    return f"{topic.path}/subscription/{quote(subscription, safe='')}"


def message_id(text: str) -> dict[str, int]:
    """``latest``, ``earliest`` or ``ledgerId:entryId[:partition]`` as the REST body."""
    low = text.strip().lower()
    if low == "latest":
        return dict(LATEST)
    if low == "earliest":
        return dict(EARLIEST)
    parts = low.split(":")
    try:
        if len(parts) in (2, 3):
            ids = [int(p) for p in parts]
            return {
                "ledgerId": ids[0],
                "entryId": ids[1],
                "partitionIndex": ids[2] if len(ids) == 3 else -1,
            }
    except ValueError:
        pass
    raise click.BadParameter(f"invalid message id {text!r} (latest, earliest or ledgerId:entryId)")


@click.group(cls=SuggestingGroup)
def topics() -> None:
    """Topics and their subscriptions."""


# ------------------------------------------------------------------ lifecycle


@topics.command("list")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@output_option
def list_(namespace: str) -> None:
    """List the non-partitioned topics and partitions of a namespace."""
    path = namespace_path(namespace).replace("/namespaces/", "/persistent/", 1)
    printer().result(rest().get(path))


@topics.command("list-partitioned-topics")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@output_option
def list_partitioned(namespace: str) -> None:
    """List the partitioned topics of a namespace."""
    path = namespace_path(namespace).replace("/namespaces/", "/persistent/", 1)
    printer().result(rest().get(f"{path}/partitioned"))


@topics.command()
@TOPIC_ARG
@output_option
def create(topic: Topic) -> None:
    """Create a non-partitioned topic."""
    rest().put(topic.path)
    printer().done(f"Topic {topic.full} created", topic=topic.full)


@topics.command()
@TOPIC_ARG
@click.option("--force", "-f", is_flag=True, help="Close its producers and consumers first.")
@output_option
def delete(topic: Topic, force: bool) -> None:
    """Delete a non-partitioned topic."""
    if force:
        rest().delete(topic.path, force=True)
    else:
        rest().delete(topic.path)
    printer().done(f"Topic {topic.full} deleted", topic=topic.full)


@topics.command("create-partitioned-topic")
@TOPIC_ARG
@click.option("--partitions", "-p", required=True, type=click.IntRange(min=1))
@output_option
def create_partitioned(topic: Topic, partitions: int) -> None:
    """Create a partitioned topic with N partitions."""
    rest().put(f"{topic.path}/partitions", partitions)
    printer().done(
        f"Partitioned topic {topic.full} created with {partitions} partitions",
        topic=topic.full,
        partitions=partitions,
    )


@topics.command("update-partitioned-topic")
@TOPIC_ARG
@click.option("--partitions", "-p", required=True, type=click.IntRange(min=1))
@output_option
def update_partitioned(topic: Topic, partitions: int) -> None:
    """Grow a partitioned topic to N partitions."""
    rest().post(f"{topic.path}/partitions", partitions)
    printer().done(
        f"Partitioned topic {topic.full} now has {partitions} partitions",
        topic=topic.full,
        partitions=partitions,
    )


@topics.command("get-partitioned-topic-metadata")
@TOPIC_ARG
@output_option
def partitioned_metadata(topic: Topic) -> None:
    """Show a topic's partition count (0: not partitioned)."""
    printer().result(rest().get(f"{topic.path}/partitions"))


@topics.command("delete-partitioned-topic")
@TOPIC_ARG
@click.option("--force", "-f", is_flag=True)
@output_option
def delete_partitioned(topic: Topic, force: bool) -> None:
    """Delete a partitioned topic and its partitions."""
    if force:
        rest().delete(f"{topic.path}/partitions", force=True)
    else:
        rest().delete(f"{topic.path}/partitions")
    printer().done(f"Partitioned topic {topic.full} deleted", topic=topic.full)


# ------------------------------------------------------------------ stats


@topics.command()
@TOPIC_ARG
@click.option("--get-precise-backlog", "-gpb", is_flag=True, help="Count the backlog exactly.")
@output_option
def stats(topic: Topic, get_precise_backlog: bool) -> None:
    """Show a topic's stats (rates, publishers, subscriptions and consumers) as JSON."""
    query = {"getPreciseBacklog": True} if get_precise_backlog else {}
    printer().result(rest().get(f"{topic.path}/stats", **query))


@topics.command("partitioned-stats")
@TOPIC_ARG
@click.option("--per-partition", is_flag=True, help="Include each partition's stats.")
@output_option
def partitioned_stats(topic: Topic, per_partition: bool) -> None:
    """Show a partitioned topic's aggregated stats."""
    printer().result(rest().get(f"{topic.path}/partitioned-stats", perPartition=per_partition))


@topics.command("stats-internal")
@TOPIC_ARG
@output_option
def stats_internal(topic: Topic) -> None:
    """Show a topic's internal stats (ledgers, cursors)."""
    printer().result(rest().get(f"{topic.path}/internalStats"))


@topics.command("last-message-id")
@TOPIC_ARG
@output_option
def last_message_id(topic: Topic) -> None:
    """Show the id of the last message stored in a topic."""
    printer().result(rest().get(f"{topic.path}/lastMessageId"))


# ------------------------------------------------------------------ subscriptions


@topics.command()
@TOPIC_ARG
@output_option
def subscriptions(topic: Topic) -> None:
    """List a topic's subscriptions."""
    printer().result(rest().get(f"{topic.path}/subscriptions"))


@topics.command("create-subscription")
@TOPIC_ARG
@SUBSCRIPTION
@click.option(
    "--messageId", "-m", "start", default="latest", show_default=True,
    help="Where it starts: latest, earliest or ledgerId:entryId.",
)  # fmt: skip
@output_option
def create_subscription(topic: Topic, subscription: str, start: str) -> None:
    """Create a durable subscription."""
    rest().put(_sub(topic, subscription), message_id(start))
    printer().done(
        f"Subscription {subscription} created on {topic.full}",
        topic=topic.full,
        subscription=subscription,
    )


@topics.command()
@TOPIC_ARG
@SUBSCRIPTION
@click.option("--force", "-f", is_flag=True, help="Disconnect its consumers first.")
@output_option
def unsubscribe(topic: Topic, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    if force:
        rest().delete(_sub(topic, subscription), force=True)
    else:
        rest().delete(_sub(topic, subscription))
    printer().done(
        f"Subscription {subscription} deleted from {topic.full}",
        topic=topic.full,
        subscription=subscription,
    )


@topics.command()
@TOPIC_ARG
@SUBSCRIPTION
@click.option("--count", "-n", required=True, type=click.IntRange(min=1))
@output_option
def skip(topic: Topic, subscription: str, count: int) -> None:
    """Skip (acknowledge) the next N messages of a subscription."""
    rest().post(f"{_sub(topic, subscription)}/skip/{count}")
    printer().done(f"Skipped {count} messages on {subscription}", skipped=count)


@topics.command("clear-backlog")
@TOPIC_ARG
@SUBSCRIPTION
@output_option
def clear_backlog(topic: Topic, subscription: str) -> None:
    """Acknowledge every message of a subscription's backlog."""
    rest().post(f"{_sub(topic, subscription)}/skip_all")
    printer().done(f"Backlog of {subscription} cleared", subscription=subscription)


@topics.command("expire-messages")
@TOPIC_ARG
@SUBSCRIPTION
@click.option("--expireTime", "-t", "expire_time", required=True, help="Age: 3600, 60m, 1h.")
@output_option
def expire_messages(topic: Topic, subscription: str, expire_time: str) -> None:
    """Acknowledge a subscription's messages older than the given age."""
    seconds = duration_s(expire_time)
    rest().post(f"{_sub(topic, subscription)}/expireMessages/{seconds}")
    printer().done(f"Messages older than {seconds} s expired on {subscription}", seconds=seconds)


@topics.command("set-replicated-subscription-status")
@TOPIC_ARG
@SUBSCRIPTION
@click.option("--enable", "-e", "enable", flag_value=True, default=None, help="Replicate it.")
@click.option("--disable", "-d", "enable", flag_value=False, help="Stop replicating it.")
@output_option
def set_replicated_subscription_status(
    topic: Topic, subscription: str, enable: bool | None
) -> None:
    """Turn a subscription's replication to the other clusters on or off."""
    if enable is None:
        fail("Need to specify either --enable or --disable")
    rest().post(f"{_sub(topic, subscription)}/replicatedSubscriptionStatus", enable)
    state = "enabled" if enable else "disabled"
    printer().done(f"Replication of {subscription} {state}", replicated=enable)


@topics.command("expire-messages-all-subscriptions")
@TOPIC_ARG
@click.option("--expireTime", "-t", "expire_time", required=True, help="Age: 3600, 60m, 1h.")
@output_option
def expire_messages_all(topic: Topic, expire_time: str) -> None:
    """Expire messages older than the given age on every subscription."""
    seconds = duration_s(expire_time)
    rest().post(f"{topic.path}/all_subscription/expireMessages/{seconds}")
    printer().done(
        f"Messages older than {seconds} s expired on every subscription", seconds=seconds
    )


@topics.command("reset-cursor")
@TOPIC_ARG
@SUBSCRIPTION
@click.option(
    "--time", "-t", "time_", default=None,
    help="Go back this far: 100m, 3h, 2d (a bare number is minutes, as in pulsar-admin).",
)  # fmt: skip
@click.option(
    "--messageId", "-m", "position", default=None, help="ledgerId:entryId, earliest or latest."
)
@output_option
def reset_cursor(topic: Topic, subscription: str, time_: str | None, position: str | None) -> None:
    """Move a subscription's cursor back (or forward) in time or to a message id."""
    if (time_ is None) == (position is None):
        raise click.UsageError("give exactly one of --time and --messageId")
    if time_ is not None:
        back_s = duration_s(time_ + "m" if time_.strip().isdigit() else time_)
        timestamp_ms = int(time.time() * 1000) - back_s * 1000
        rest().post(f"{_sub(topic, subscription)}/resetcursor/{timestamp_ms}")
        target: Any = timestamp_ms
    else:
        target = message_id(position or "")
        rest().post(f"{_sub(topic, subscription)}/resetcursor", target)
    printer().done(f"Cursor of {subscription} reset", subscription=subscription, target=target)


# ------------------------------------------------------------------ peek


def _peeked(answer: RawResponse) -> list[dict[str, Any]]:
    """One peeked entry as records (a batch gives one record per message)."""
    headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("x-pulsar-")}
    lower = {k.lower(): v for k, v in headers.items()}
    props = {
        k[len("x-pulsar-property-") :]: v
        for k, v in headers.items()
        if k.lower().startswith("x-pulsar-property-")
    }
    base = {
        "messageId": lower.get("x-pulsar-message-id"),
        "publishTime": lower.get("x-pulsar-publish-time"),
        "key": lower.get("x-pulsar-partition-key"),
        "properties": props,
    }
    count = int(lower.get("x-pulsar-num-batch-message", "0") or 0)
    compression = lower.get("x-pulsar-compression", "NONE").upper()
    if count > 0 and compression in ("", "NONE"):
        from magnetar.client.message import split_batch_payload

        records = []
        for index, (payload, p, key, _et, _ok, _seq, _null) in enumerate(
            split_batch_payload(answer.body, count)
        ):
            records.append(
                {
                    **base,
                    "batchIndex": index,
                    "key": key,
                    "properties": p or {},
                    **_payload(payload),
                }
            )
        return records
    return [{**base, **_payload(answer.body)}]


def _payload(data: bytes) -> dict[str, Any]:
    try:
        return {"payload": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"payloadBase64": base64.b64encode(data).decode()}


def _hexdump(data: bytes) -> str:
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines)


@topics.command("peek-messages")
@TOPIC_ARG
@SUBSCRIPTION
@click.option("--count", "-n", default=1, show_default=True, type=click.IntRange(1, PEEK_MAX))
@output_option
def peek_messages(topic: Topic, subscription: str, count: int) -> None:
    """Show the next N messages of a subscription without consuming them."""
    records: list[dict[str, Any]] = []
    position = 0
    # An entry may hold a batch of messages: walk entries until N messages are collected
    # or the backlog ends (404 after at least one message).
    while len(records) < count:
        position += 1
        try:
            answer = rest().request(
                "GET", f"{_sub(topic, subscription)}/position/{position}", raw=True
            )
        except AdminHttpError as e:
            if e.status == 404 and records:
                break
            raise
        records.extend(_peeked(answer))
    del records[count:]
    _show(records)


def _show(records: list[dict[str, Any]]) -> None:
    """Peeked or examined messages: a JSON list, or for people one block per message."""
    out = printer()
    if out.json:
        out.result(records)
        return
    for r in records:
        batch = f" (batch index {r['batchIndex']})" if "batchIndex" in r else ""
        click.echo(f"Message ID: {r['messageId']}{batch}")
        if r.get("publishTime"):
            click.echo(f"Publish time: {r['publishTime']}")
        if r.get("key"):
            click.echo(f"Key: {r['key']}")
        if r["properties"]:
            click.echo("Properties: " + ", ".join(f"{k}={v}" for k, v in r["properties"].items()))
        if "payload" in r:
            click.echo(r["payload"])
        else:
            click.echo(_hexdump(base64.b64decode(r["payloadBase64"])))
        click.echo("")


@topics.command("examine-message")
@TOPIC_ARG
@click.option(
    "--initialPosition", "-i", "initial_position", default="latest", show_default=True,
    type=click.Choice(["latest", "earliest"], case_sensitive=False), help="Count from here.",
)  # fmt: skip
@click.option(
    "--messagePosition", "-m", "message_position", default=1, show_default=True,
    type=click.IntRange(min=1), help="The n-th entry from the initial position (1: it).",
)  # fmt: skip
@output_option
def examine_message(topic: Topic, initial_position: str, message_position: int) -> None:
    """Show a message counted from the first or the last one, no subscription needed."""
    answer = rest().request(
        "GET", f"{topic.path}/examinemessage", raw=True,
        query={"initialPosition": initial_position.lower(), "messagePosition": message_position},
    )  # fmt: skip
    _show(_peeked(answer))


@topics.command("get-message-by-id")
@TOPIC_ARG
@click.option("--ledgerId", "-l", "ledger_id", required=True, type=int)
@click.option("--entryId", "-e", "entry_id", required=True, type=int)
@output_option
def get_message_by_id(topic: Topic, ledger_id: int, entry_id: int) -> None:
    """Show the message stored at ledgerId:entryId."""
    answer = rest().request("GET", f"{topic.path}/ledger/{ledger_id}/entry/{entry_id}", raw=True)
    _show(_peeked(answer))


@topics.command("analyze-backlog")
@TOPIC_ARG
@SUBSCRIPTION
@click.option(
    "--messageId", "-m", "position", default=None,
    help="Start here (ledgerId:entryId) instead of the first unacknowledged message.",
)  # fmt: skip
@output_option
def analyze_backlog(topic: Topic, subscription: str, position: str | None) -> None:
    """Count the entries and messages of a subscription's backlog."""
    body = None if position is None else message_id(position)
    printer().result(rest().post(f"{_sub(topic, subscription)}/analyzeBacklog", body))


# ------------------------------------------------------------------ compaction and lifecycle


@topics.command()
@TOPIC_ARG
@output_option
def compact(topic: Topic) -> None:
    """Start compacting a topic (see compaction-status)."""
    rest().put(f"{topic.path}/compaction")
    printer().done(f"Compaction of {topic.full} started", topic=topic.full)


@topics.command("compaction-status")
@TOPIC_ARG
@click.option("--wait-complete", "-w", is_flag=True, help="Wait until it is no longer running.")
@click.option(
    "--timeout", "timeout_s", default=300.0, show_default=True, help="Seconds to wait at most."
)
@output_option
def compaction_status(topic: Topic, wait_complete: bool, timeout_s: float) -> None:
    """Show the state of a topic's last compaction (NOT_RUN, RUNNING, SUCCESS, ERROR)."""
    status, state = poll_status(
        f"{topic.path}/compaction",
        f"compaction of {topic.full}",
        wait_complete=wait_complete,
        timeout_s=timeout_s,
        interval_s=COMPACTION_POLL_INTERVAL_S,
    )
    out = printer()
    if out.json or not isinstance(status, dict):
        out.result(status)
        return
    click.echo(f"Compaction of {topic.full}: {state}")
    if status.get("lastError"):
        click.echo(f"Last error: {status['lastError']}")
    if state == "ERROR":
        raise SystemExit(1)


@topics.command()
@TOPIC_ARG
@output_option
def terminate(topic: Topic) -> None:
    """Seal a topic: no more messages can be published."""
    last = rest().post(f"{topic.path}/terminate")
    out = printer()
    if out.json:
        out.result({"topic": topic.full, "lastMessageId": last})
    else:
        shown = (
            f"{last['ledgerId']}:{last['entryId']}"
            if isinstance(last, dict) and "ledgerId" in last
            else last
        )
        click.echo(f"Topic {topic.full} terminated; last message id: {shown}")


@topics.command()
@TOPIC_ARG
@output_option
def lookup(topic: Topic) -> None:
    """Show the broker serving a topic (its pulsar:// URL; in JSON every URL)."""
    answer = rest().get("/lookup/v2/topic/" + topic.path.removeprefix("/admin/v2/"))
    out = printer()
    if out.json:
        out.result(answer)
    else:
        click.echo(answer["brokerUrl"] if isinstance(answer, dict) else answer)


@topics.command()
@TOPIC_ARG
@output_option
def unload(topic: Topic) -> None:
    """Unload a topic from its broker (clients reconnect, possibly elsewhere)."""
    rest().put(f"{topic.path}/unload")
    printer().done(f"Topic {topic.full} unloaded", topic=topic.full)


# ------------------------------------------------------------------ topic-level policies

add_backlog_quota_commands(topics, TOPIC_TARGET)
for _policy in TOPIC_POLICIES:
    add_policy_commands(topics, TOPIC_TARGET, _policy)

# ------------------------------------------------------------------ replication clusters

topics.add_command(replication.set_replication_clusters)
topics.add_command(replication.get_replication_clusters)
topics.add_command(replication.remove_replication_clusters)
for _command in topic_offload.COMMANDS:
    topics.add_command(_command)
