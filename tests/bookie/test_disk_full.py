"""Disk-full faults with real processes: a standalone whose data directory is a small tmpfs,
the official ``pulsar`` client producing, and a file that fills the disk (issue 14)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pulsar

from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.disk import Tmpfs, fill_disk

from .conftest import (
    CLIENT_LOG,
    PAYLOAD,
    TOPIC,
    Http,
    close_client,
    keep_messages,
    read_all,
    retrying_sends,
    send_until_refused,
)


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
        close_client(client)


def _failed_checkpoints(log: str) -> int:
    """Checkpoints that failed (the first in the checkpoint loop, retries in the disk loop)."""
    return log.count("checkpoint failed") + log.count("storage still failing")


def checkpoint_file(data_dir: Path) -> tuple[int, int] | None:
    """Identifies the bookie's checkpoint file: a successful checkpoint replaces it (a new
    inode), a failed one leaves it alone."""
    try:
        st = (data_dir / "bookie" / "checkpoint").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def test_acknowledged_messages_survive_a_short_disk_full_then_a_kill(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    """Issue 14.1: checkpoints fail while the disk is full; once space is back the next
    checkpoint must still cover everything the failed ones did not write, so a SIGKILL
    after it loses nothing."""
    node.start()
    try:
        produce(node.url, 0, 2000)
        filler = small_disk.path / "filler"
        fill_disk(filler)
        wait_until(
            lambda: _failed_checkpoints(node.log_tail(400)) >= 2,
            timeout_s=30,
            what="checkpoints failing on the full disk",
        )
        before = checkpoint_file(small_disk.path)
        filler.unlink()
        wait_until(
            lambda: checkpoint_file(small_disk.path) not in (None, before),
            timeout_s=30,
            what="a checkpoint succeeding once space is back",
        )
        node.kill()
        node.start()
        missing = set(range(2000)) - read_all(node.url)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    finally:
        node.kill()


def test_a_full_disk_fails_sends_promptly_reports_unhealthy_and_recovers_by_itself(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    """Issue 14.2 (a full disk: the journal's write fails, or the disk check turns the
    bookie read-only first): sends get a SEND_ERROR promptly (never silence), health
    and readiness say the bookie is read-only, and once space is back the same topic takes
    writes again without a restart; SIGTERM stops the process; nothing acknowledged is lost."""
    node.start()
    http = Http(node)
    log = CLIENT_LOG.mark()
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=log.logger)
    try:
        sends = retrying_sends(client)
        before = sends.send(200)
        wait_until(lambda: sends.settled(before), timeout_s=60, what="sends before the fault")
        assert sends.acked == set(before)
        assert http.get("/ready") == (200, "ok")

        filler = small_disk.path / "filler"
        fill_disk(filler)
        # ~5 MiB at once: more than the journal zero-filled ahead, so its next write
        # usually meets ENOSPC before the bookie's disk check turns it read-only.
        burst = sends.send(300)
        during = range(burst.start, send_until_refused(sends, log).stop)
        assert "storage write failed" in log.send_errors()[-1]
        for path in ("/ready", "/admin/v2/brokers/health"):
            _status, body = wait_until(
                lambda path=path: (r := http.get(path))[0] == 503 and r,
                timeout_s=30,
                what=f"{path} reporting the fault",
            )
            assert "read-only" in body, body

        filler.unlink()
        # The client re-sends what was refused; the same topic takes it, no restart.
        wait_until(lambda: sends.settled(during), timeout_s=60, what="sends after space returned")
        assert sends.acked == set(before) | set(during), sends.failed
        wait_until(lambda: http.get("/ready") == (200, "ok"), timeout_s=30, what="ready again")
        sends.producer.send(PAYLOAD, properties={"i": str(sends.sent)})
        acked = sends.acked | {sends.sent}
    finally:
        close_client(client)
    assert node.stop(timeout_s=30) == 0
    node.start()
    try:
        missing = acked - read_all(node.url)
        assert not missing, f"{len(missing)} acknowledged messages lost"
    finally:
        node.kill()


def _leave_free(filler: Path, free_bytes: int) -> None:
    """Shrink ``filler`` until its file system has about ``free_bytes`` free."""
    st = os.statvfs(filler)
    shrink = free_bytes - st.f_bavail * st.f_frsize
    os.truncate(filler, max(filler.stat().st_size - shrink, 0))


def test_usage_over_the_threshold_fails_sends_and_recovers_once_under_the_low_water_mark(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    """Issue 14.2 and issue 38 (read-only by threshold, BookKeeper's usage fractions: 0.95,
    writable again under 0.90): no write fails on the disk, the bookie just turns read-only;
    freed to a usage well under 0.90, the same topic takes writes again. The freed disk has
    about 60 MB free: under the absolute 64 MiB floor that used to keep the bookie read-only
    for good. (The hysteresis between the lines: tests/bookie/test_disk_thresholds.py.)"""
    node.start()
    http = Http(node)
    log = CLIENT_LOG.mark()
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=log.logger)
    total = small_disk.size_mib * 1024 * 1024
    try:
        sends = retrying_sends(client)
        before = sends.send(50)
        wait_until(lambda: sends.settled(before), timeout_s=60, what="sends before")
        filler = small_disk.path / "filler"
        fill_disk(filler, leave_bytes=total * 3 // 100)  # 97 % used
        _status, body = wait_until(
            lambda: (r := http.get("/admin/v2/brokers/health"))[0] == 503 and r,
            timeout_s=30,
            what="health reporting the read-only bookie",
        )
        assert "read-only" in body and "disk full" in body, body
        during = send_until_refused(sends, log)
        _leave_free(filler, 60 * 1000 * 1000)
        wait_until(lambda: sends.settled(during), timeout_s=60, what="sends after space returned")
        assert sends.acked == set(before) | set(during), sends.failed
        assert http.get("/admin/v2/brokers/health") == (200, "ok")
    finally:
        close_client(client)
        node.kill()


SEND_TIMEOUT_MS = 3_000


def _send_until_it_fails(producer: pulsar.Producer) -> tuple[str, float]:
    """Synchronous sends until one fails (at most 600 of 16 KiB: more than the journal
    zero-fills ahead); the failure's name and how long that send took."""
    for _ in range(600):
        started = time.monotonic()
        try:
            producer.send(PAYLOAD)
        except pulsar.PulsarException as exc:
            return type(exc).__name__, time.monotonic() - started
    return "no failure", 0.0


def test_a_send_times_out_as_configured_while_the_disk_is_full(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    """Issue 38: with the disk full, the official client's ``send()`` with an 8 s send
    timeout blocked for over nine minutes: each SEND_ERROR made the C++ client drop the
    connection, re-create the producer (which restarts its send-timeout timer) and re-send.
    The broker now refuses to admit a producer while storage fails, so the timer runs out:
    the send fails with Timeout. Once the disk has room, the same producer writes again."""
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=CLIENT_LOG.logger)
    try:
        keep_messages(client)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS
        )
        producer.send(PAYLOAD)
        filler = small_disk.path / "filler"
        fill_disk(filler)
        outcome: list[tuple[str, float]] = []
        sender = threading.Thread(
            target=lambda: outcome.append(_send_until_it_fails(producer)), daemon=True
        )
        sender.start()
        sender.join(120)
        assert not sender.is_alive(), "a send() blocked for 2 minutes with a 3 s send timeout"
        failure, took_s = outcome[0]
        assert failure == "Timeout", outcome
        assert took_s < 60, f"the failing send took {took_s:.0f} s (send timeout 3 s)"

        filler.unlink()

        def sends_again() -> bool:
            try:
                producer.send(PAYLOAD)
            except pulsar.Timeout:
                return False
            return True

        wait_until(sends_again, timeout_s=90, what="the producer writing once there is room")
    finally:
        close_client(client)
        node.kill()


def test_sigterm_stops_promptly_while_the_disk_is_full(
    small_disk: Tmpfs, node: StandaloneProcess
) -> None:
    """Issue 14.2: shutdown is bounded in every state, including a full disk with sends
    pending."""
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        sends = retrying_sends(client)
        sends.send(100)
        fill_disk(small_disk.path / "filler")
        sends.send(100)
        wait_until(
            lambda: "No space left on device" in node.log_tail(200),
            timeout_s=30,
            what="writes failing on the full disk",
        )
        assert node.stop(timeout_s=30) == 0
        assert "Traceback" not in node.log_tail(400)
    finally:
        close_client(client)
        node.kill()
