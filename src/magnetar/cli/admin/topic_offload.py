"""``magnetar admin topics offload`` and ``offload-status`` (pulsar-admin's): start moving a
topic's closed ledgers to tiered storage, and watch it.

``offload --size-threshold 10M`` keeps about that many bytes on the bookies: as pulsar-admin
does, it reads the topic's internal stats and walks the ledgers newest first until their
sizes add up past the threshold; every ledger older than the one where that happens is
offloaded (``PUT …/offload`` with the message id ``ledgerId:0`` of that ledger's successor).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic
from magnetar.cli.admin.process_status import poll_status
from magnetar.cli.admin.units import size_bytes
from magnetar.cli.output import fail, output_option, printer

STATUS_POLL_INTERVAL_S = 1.0


def first_ledger_within_threshold(
    ledgers: Sequence[dict[str, Any]], threshold_bytes: int
) -> dict[str, int] | None:
    """pulsar-admin's ``findFirstLedgerWithinThreshold``: the message id before which
    everything is offloaded so that about ``threshold_bytes`` stay on the bookies (None:
    the topic is within the threshold already)."""
    if not ledgers:
        return None
    newest_first = list(reversed(ledgers))
    suffix = 0
    previous = int(newest_first[0]["ledgerId"])
    for ledger in newest_first:
        suffix += int(ledger.get("size", 0))
        if suffix > threshold_bytes:
            return {"ledgerId": previous, "entryId": 0, "partitionIndex": -1}
        previous = int(ledger["ledgerId"])
    return None


@click.command()
@click.argument("topic", type=TOPIC)
@click.option(
    "--size-threshold",
    "-s",
    "threshold",
    required=True,
    help="Bytes to keep on the bookies (e.g. 10M, 1G); older ledgers are offloaded.",
)
@output_option
def offload(topic: Topic, threshold: str) -> None:
    """Offload a topic's older ledgers to tiered storage (see offload-status)."""
    threshold_bytes = size_bytes(threshold)  # click's usage error when malformed
    stats = rest().get(f"{topic.path}/internalStats")
    ledgers = stats.get("ledgers", []) if isinstance(stats, dict) else []
    if not ledgers:
        fail(f"{topic.full} has no data")
    if isinstance(stats, dict):
        ledgers[-1] = dict(ledgers[-1], size=stats.get("currentLedgerSize", ledgers[-1]["size"]))
    up_to = first_ledger_within_threshold(ledgers, threshold_bytes)
    out = printer()
    if up_to is None:
        out.done(f"Nothing to offload for {topic.full}", topic=topic.full, offloaded=False)
        return
    rest().put(f"{topic.path}/offload", up_to)
    shown = f"{up_to['ledgerId']}:{up_to['entryId']}"
    out.done(
        f"Offload triggered for {topic.full} for messages before {shown}",
        topic=topic.full,
        messageId=up_to,
    )


@click.command("offload-status")
@click.argument("topic", type=TOPIC)
@click.option("--wait-complete", "-w", is_flag=True, help="Wait until it is no longer running.")
@click.option(
    "--timeout", "timeout_s", default=600.0, show_default=True, help="Seconds to wait at most."
)
@output_option
def offload_status(topic: Topic, wait_complete: bool, timeout_s: float) -> None:
    """Show the state of a topic's offload (NOT_RUN, RUNNING, SUCCESS, ERROR); exit 1 on
    ERROR."""
    status, state = poll_status(
        f"{topic.path}/offload",
        f"offload of {topic.full}",
        wait_complete=wait_complete,
        timeout_s=timeout_s,
        interval_s=STATUS_POLL_INTERVAL_S,
    )
    out = printer()
    if out.json or not isinstance(status, dict):
        out.result(status)
        if state == "ERROR":
            raise SystemExit(1)
        return
    first = status.get("firstUnoffloadedMessage") or {}
    words = {
        "NOT_RUN": f"Offload has not been run for {topic.full} since broker startup",
        "RUNNING": "Offload is currently running",
        "SUCCESS": "Offload was a success",
    }
    if state == "ERROR":
        fail(f"Error offloading {topic.full}: {status.get('lastError') or 'unknown error'}")
    click.echo(words.get(str(state), f"Offload status: {state}"))
    if "ledgerId" in first:
        click.echo(f"First unoffloaded message: {first['ledgerId']}:{first['entryId']}")


COMMANDS = (offload, offload_status)
