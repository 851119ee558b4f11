"""Disk-full faults with real processes: a standalone whose data directory is a small tmpfs,
the official ``pulsar`` client producing, and a file that fills the disk (issue 14)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.disk import Tmpfs, fill_disk

TOPIC = "persistent://public/default/disk-full"
PAYLOAD = b"x" * 16 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    """A 150 MiB tmpfs for one standalone's data directory (its log stays outside)."""
    with Tmpfs(tmp_path / "data", 150) as disk:
        yield disk


def produce(url: str, first: int, count: int) -> None:
    """Send ``count`` numbered messages and wait for every receipt."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=30_000, block_if_queue_full=True
        )
        errors: list[pulsar.Result] = []

        def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                errors.append(result)

        for i in range(first, first + count):
            producer.send_async(PAYLOAD, done, properties={"i": str(i)})
        producer.flush()
        assert not errors, errors
    finally:
        client.close()


def read_all(url: str) -> set[int]:
    """The numbers of every message stored in the topic."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        seen: set[int] = set()
        while reader.has_message_available():
            seen.add(int(reader.read_next(10_000).properties()["i"]))
        return seen
    finally:
        client.close()


def checkpoint_state(data_dir: Path) -> dict[str, int]:
    try:
        state: dict[str, int] = json.loads((data_dir / "bookie" / "checkpoint").read_text())
    except (OSError, ValueError):
        return {}
    return state


def test_acknowledged_messages_survive_a_short_disk_full_then_a_kill(
    small_disk: Tmpfs,
) -> None:
    """Issue 14.1: checkpoints fail while the disk is full; once space is back the next
    checkpoint must still cover everything the failed ones did not write, so a SIGKILL
    after it loses nothing."""
    node = StandaloneProcess(small_disk.path)
    node.start()
    try:
        produce(node.url, 0, 2000)
        filler = small_disk.path / "filler"
        fill_disk(filler)
        wait_until(
            lambda: node.log_tail(400).count("checkpoint failed") >= 2,
            timeout_s=30,
            what="checkpoints failing on the full disk",
        )
        before = checkpoint_state(small_disk.path)
        filler.unlink()
        wait_until(
            lambda: checkpoint_state(small_disk.path) not in ({}, before),
            timeout_s=30,
            what="a checkpoint succeeding once space is back",
        )
        node.kill()
        node.start()
        missing = set(range(2000)) - read_all(node.url)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        node.kill()
