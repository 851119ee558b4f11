"""Helpers of the bookie tests: a small disk for a standalone's data directory, and the
official client producing numbered messages to it, with what it was told."""

from __future__ import annotations

import contextlib
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import pulsar
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.metadata import MetadataStore, connect
from magnetar.testing import StandaloneProcess, wait_until
from magnetar.testing.disk import Tmpfs

TOPIC = "persistent://public/default/disk-full"
PAYLOAD = b"x" * 16 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Tmpfs]:
    """A 150 MiB tmpfs for one standalone's data directory (its log stays outside)."""
    with Tmpfs(tmp_path / "data", 150) as disk:
        yield disk


@pytest.fixture
def node(small_disk: Tmpfs) -> Iterator[StandaloneProcess]:
    """A standalone (not started) over ``small_disk``, killed at teardown whatever happens
    (before the disk is unmounted)."""
    process = StandaloneProcess(small_disk.path)
    try:
        yield process
    finally:
        process.kill()


def close_client(client: pulsar.Client) -> None:
    """Close the client; one that cannot reach its broker any more may time out doing so."""
    with contextlib.suppress(pulsar.PulsarException):
        client.close()


def keep_messages(client: pulsar.Client) -> None:
    """A durable subscription, so rolled-over ledgers are kept (without one, a topic with
    no retention drops every closed ledger, as Pulsar does)."""
    client.subscribe(TOPIC, "keep").close()


def retrying_sends(client: pulsar.Client) -> Sends:
    """:func:`keep_messages`, then :class:`Sends` over a producer of ``TOPIC`` without
    batching that retries each send until it is acknowledged (no send timeout) and blocks
    when its queue is full."""
    keep_messages(client)
    producer = client.create_producer(
        TOPIC, batching_enabled=False, send_timeout_millis=0, block_if_queue_full=True
    )
    return Sends(producer)


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

    def refusals(self) -> list[str]:
        """SEND_ERRORs, and producers the broker refused to (re)create (a topic loaded
        while storage fails cannot start a ledger)."""
        return [
            line
            for line in self.lines[self._since :]
            if any(
                what in line.lower()
                for what in ("send error", "failed to create producer", "failed to reconnect")
            )
        ]


CLIENT_LOG = ClientLog()
# The C++ client installs the logger of the first Client a process creates, for good. Test
# modules are all imported (collected) before any test runs, so one created here comes
# first even when other packages' tests run earlier; it never connects.
pulsar.Client("pulsar://127.0.0.1:9", logger=CLIENT_LOG.logger).close()


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


def send_until_refused(sends: Sends, log: ClientLog, timeout_s: float = 30) -> range:
    """Send a few messages every half second until the broker refuses (a SEND_ERROR, or a
    refused producer after a reconnect, in the client's log): writes into space the journal
    allocated earlier still succeed until the bookie notices the disk. Returns the numbers
    sent."""
    refusals_before = len(log.refusals())
    first = sends.sent

    def refused() -> bool:
        if len(log.refusals()) > refusals_before:
            return True
        sends.send(5)
        return False

    try:
        wait_until(refused, timeout_s=timeout_s, interval_s=0.5, what="the broker refusing sends")
    except AssertionError as exc:
        tail = "\n".join(log.lines[-20:])
        raise AssertionError(f"{exc}; the client's last log lines:\n{tail}") from None
    return range(first, sends.sent)


@pytest.fixture
async def bookie(tmp_path: Path) -> AsyncIterator[Bookie]:
    """A started bookie on a free port with an in-memory metadata store (a module may
    define its own, differently configured)."""
    store: MetadataStore = await connect("memory:")
    b = Bookie(BookieConfig(data_dir=tmp_path / "b", port=0, disk_free_min_bytes=0), store)
    await b.start()
    yield b
    await b.stop()
    await store.close()
