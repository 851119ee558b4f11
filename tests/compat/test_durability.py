"""Restarts and crashes: every acknowledged message and subscription position survives
(DESIGN §6), dedup state survives a restart (reference §6.4)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pulsar

from magnetar.testing import StandaloneProcess

from .helpers import assert_nothing_more, new_client, receive_all

TOPIC = "persistent://public/default/durable"


class _Acks:
    """The numbers of the messages a producer's sends got acknowledged (recorded from the
    client's threads); :attr:`reached` is set once ``wanted`` are."""

    def __init__(self, wanted: int) -> None:
        self._numbers: list[int] = []
        self._lock = threading.Lock()
        self._wanted = wanted
        self.reached = threading.Event()

    def callback(self, number: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def acknowledged(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if res == pulsar.Result.Ok:
                with self._lock:
                    self._numbers.append(number)
                    if len(self._numbers) >= self._wanted:
                        self.reached.set()

        return acknowledged

    def count(self) -> int:
        with self._lock:
            return len(self._numbers)

    def sorted(self) -> list[int]:
        with self._lock:
            return sorted(self._numbers)


def test_clean_restart_keeps_messages_and_positions(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    client = new_client(node.url)
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(50):
        producer.send(f"m-{i}".encode())
    for m in receive_all(consumer, 20):
        consumer.acknowledge(m)
    consumer.close()  # acks flushed before the subscription is closed
    client.close()
    assert node.stop() == 0

    node.start()
    client = new_client(node.url)
    consumer = client.subscribe(TOPIC, "sub")
    msgs = receive_all(consumer, 30)
    assert [m.data() for m in msgs] == [f"m-{i}".encode() for i in range(20, 50)]
    assert_nothing_more(consumer)
    # the log itself is intact too
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    assert [m.data() for m in receive_all(reader, 50)] == [f"m-{i}".encode() for i in range(50)]
    client.close()


def test_sigkill_during_sends_loses_no_acknowledged_message(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    total = 100_000
    node = standalone_factory()
    client = new_client(node.url)
    # The subscription exists before the sends, so it holds every message: without one (and
    # with no retention policy) closed ledgers are trimmed at once, as Pulsar trims them.
    client.subscribe(TOPIC, "sub").close()
    producer = client.create_producer(
        TOPIC, batching_enabled=False, max_pending_messages=1000, block_if_queue_full=True
    )
    acks = _Acks(total // 2)

    def send_all() -> None:
        for i in range(total):
            try:
                producer.send_async(f"{i}".encode(), acks.callback(i))
            except pulsar.PulsarException:
                return

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    assert acks.reached.wait(120), f"only {acks.count()} sends acknowledged"
    node.kill()  # SIGKILL while sends are in flight
    acknowledged = acks.sorted()
    client.close()
    sender.join(30)

    node.start()
    client = new_client(node.url)
    consumer = client.subscribe(TOPIC, "sub")
    got: list[int] = []
    while True:
        try:
            msg = consumer.receive(3000)
        except pulsar.Timeout:
            break
        got.append(int(msg.data()))
        consumer.acknowledge(msg)
    client.close()
    assert got == sorted(got), "stored messages out of order"
    missing = set(acknowledged) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    assert len(got) >= len(acknowledged) >= total // 2


def test_dedup_last_sequence_id_survives_restart(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory("--deduplication")
    client = new_client(node.url)
    consumer = client.subscribe(TOPIC, "sub")
    producer = client.create_producer(TOPIC, producer_name="dedup-producer", batching_enabled=False)
    for i in range(10):
        producer.send(f"d-{i}".encode(), sequence_id=i)
    # re-sent sequence ids are acknowledged but not stored again
    producer.send(b"dup-1", sequence_id=1)
    producer.send(b"dup-2", sequence_id=2)
    msgs = receive_all(consumer, 10)
    assert [m.data() for m in msgs] == [f"d-{i}".encode() for i in range(10)]
    assert_nothing_more(consumer)
    producer.close()
    producer = client.create_producer(TOPIC, producer_name="dedup-producer")
    assert producer.last_sequence_id() == 9
    producer.close()
    client.close()
    assert node.stop() == 0

    node.start()
    client = new_client(node.url)
    producer = client.create_producer(TOPIC, producer_name="dedup-producer")
    assert producer.last_sequence_id() == 9
    client.close()


def test_sigkill_during_batched_sends_loses_no_acknowledged_message(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    """Batches of ~400 KB: the journal's batches go through its shared ring, and the
    checkpoints, behind the producer, write the entry logs directly (docs/storage.md)."""
    node = standalone_factory()
    client = new_client(node.url)
    client.subscribe(TOPIC, "sub").close()
    producer = client.create_producer(
        TOPIC,
        batching_enabled=True,
        batching_max_messages=100,
        batching_max_allowed_size_in_bytes=1024 * 1024,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )
    pad = b"p" * 4000
    acks = _Acks(60_000)
    stop = threading.Event()

    def send_all() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.send_async(b"%08d" % i + pad, acks.callback(i))
            except pulsar.PulsarException:
                return
            i += 1

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    assert acks.reached.wait(120), f"only {acks.count()} sends acknowledged"
    node.kill()  # SIGKILL while batches are in flight
    acknowledged = acks.sorted()
    stop.set()
    client.close()
    sender.join(30)

    node.start()
    client = new_client(node.url)
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    got: list[int] = []
    while True:
        try:
            msg = reader.read_next(3000)
        except pulsar.Timeout:
            break
        got.append(int(msg.data()[:8]))
    client.close()
    assert got == sorted(got), "stored messages out of order"
    missing = set(acknowledged) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
