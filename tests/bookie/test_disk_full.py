"""Disk-full faults with real processes: a standalone whose data directory is a small tmpfs,
the official ``pulsar`` client producing, and a file that fills the disk (issue 14)."""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
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


def keep_messages(client: pulsar.Client) -> None:
    """A durable subscription, so rolled-over ledgers are kept (without one, a topic with
    no retention drops every closed ledger, as Pulsar does)."""
    client.subscribe(TOPIC, "keep").close()


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


def checkpoint_file(data_dir: Path) -> tuple[int, int] | None:
    """Identifies the bookie's checkpoint file: a successful checkpoint replaces it (a new
    inode), a failed one leaves it alone."""
    try:
        st = (data_dir / "bookie" / "checkpoint").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


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


class Http:
    """GET on the standalone's HTTP port: ``(status, body)``."""

    def __init__(self, node: StandaloneProcess) -> None:
        self.node = node

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.node.http_url + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


class ClientLog(logging.Handler):
    """The official client's log lines (it logs each SEND_ERROR it receives). The client's
    logger is process-wide (the first client's wins), so tests share one instance and look
    at the lines after their own :meth:`mark`."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger("pulsar-client-disk-full-tests")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.logger.addHandler(self)
        self._since = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def mark(self) -> ClientLog:
        self._since = len(self.lines)
        return self

    def send_errors(self) -> list[str]:
        return [line for line in self.lines[self._since :] if "send error" in line.lower()]


CLIENT_LOG = ClientLog()


class Sends:
    """Numbered async sends whose outcome is recorded (``acked``: numbers the broker
    confirmed; the client retries the others itself until its send timeout)."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self.acked: set[int] = set()
        self.failed: dict[int, str] = {}
        self.sent = 0
        self._lock = threading.Lock()

    def send(self, count: int) -> range:
        numbers = range(self.sent, self.sent + count)
        for i in numbers:
            self.producer.send_async(PAYLOAD, partial(self._done, i), properties={"i": str(i)})
        self.sent += count
        return numbers

    def _done(self, i: int, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        with self._lock:
            if result == pulsar.Result.Ok:
                self.acked.add(i)
            else:
                self.failed[i] = str(result)

    def settled(self, numbers: range) -> bool:
        with self._lock:
            return all(i in self.acked or i in self.failed for i in numbers)


def test_a_full_disk_fails_sends_promptly_reports_unhealthy_and_recovers_by_itself(
    small_disk: Tmpfs,
) -> None:
    """Issue 14.2 (journal ENOSPC): sends get a SEND_ERROR promptly (never silence), health
    and readiness say the bookie is read-only, and once space is back the same topic takes
    writes again without a restart; SIGTERM stops the process; nothing acknowledged is lost."""
    node = StandaloneProcess(small_disk.path)
    node.start()
    http = Http(node)
    log = CLIENT_LOG.mark()
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=log.logger)
    try:
        keep_messages(client)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
        )
        sends = Sends(producer)
        before = sends.send(200)
        wait_until(lambda: sends.settled(before), timeout_s=60, what="sends before the fault")
        assert sends.acked == set(before)
        assert http.get("/ready") == (200, "ok")

        filler = small_disk.path / "filler"
        fill_disk(filler)
        during = sends.send(100)
        wait_until(log.send_errors, timeout_s=30, what="a SEND_ERROR from the broker")
        assert "storage write failed" in log.send_errors()[0]
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
        producer.send(PAYLOAD, properties={"i": str(sends.sent)})
        acked = sends.acked | {sends.sent}
    finally:
        client.close()
    assert node.stop(timeout_s=30) == 0
    node.start()
    try:
        missing = acked - read_all(node.url)
        assert not missing, f"{len(missing)} acknowledged messages lost"
    finally:
        node.kill()


def test_free_space_under_the_threshold_fails_sends_and_recovers_by_itself(
    small_disk: Tmpfs,
) -> None:
    """Issue 14.2 (read-only by threshold, 64 MiB in the standalone): no write fails on the
    disk, the bookie just turns read-only; the topic must take writes again afterwards."""
    node = StandaloneProcess(small_disk.path)
    node.start()
    http = Http(node)
    log = CLIENT_LOG.mark()
    client = pulsar.Client(node.url, operation_timeout_seconds=30, logger=log.logger)
    try:
        keep_messages(client)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
        )
        sends = Sends(producer)
        before = sends.send(50)
        wait_until(lambda: sends.settled(before), timeout_s=60, what="sends before")
        filler = small_disk.path / "filler"
        fill_disk(filler, leave_bytes=32 * 1024 * 1024)
        _status, body = wait_until(
            lambda: (r := http.get("/admin/v2/brokers/health"))[0] == 503 and r,
            timeout_s=30,
            what="health reporting the read-only bookie",
        )
        assert "read-only" in body and "free disk" in body, body
        during = sends.send(20)
        wait_until(log.send_errors, timeout_s=30, what="a SEND_ERROR from the broker")
        filler.unlink()
        wait_until(lambda: sends.settled(during), timeout_s=60, what="sends after space returned")
        assert sends.acked == set(before) | set(during), sends.failed
        assert http.get("/admin/v2/brokers/health") == (200, "ok")
    finally:
        client.close()
        node.kill()


def test_sigterm_stops_promptly_while_the_disk_is_full(small_disk: Tmpfs) -> None:
    """Issue 14.2: shutdown is bounded in every state, including a full disk with sends
    pending."""
    node = StandaloneProcess(small_disk.path)
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=30)
    try:
        keep_messages(client)
        producer = client.create_producer(
            TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
        )
        sends = Sends(producer)
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
        client.close()
        node.kill()
