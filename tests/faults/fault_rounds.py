"""Rounds of seeded faults on a :class:`~tests.faults.fault_cluster.FaultCluster` while one
producer (deduplication on) writes a topic, then the whole history checked.

Each round: send for a while, inject a fault chosen by the seed among ``scenarios``, keep
sending until it heals, heal it (restarting a broker whose session expired), and time how
long after the heal the first send made after it is acknowledged (the recovery time). At the
end: every send answered, the topic read back on a subscription that acknowledges nothing
(made before the first send) and checked by :meth:`History.check` (exactly once, in order),
a consumer that acknowledges as it goes and is reopened each round checked for redeliveries
past its acknowledgements, and the stored ledgers checked by :meth:`History.check_stored`
(never two writers at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pulsar

from magnetar.testing.history import Consumer, History
from tests.faults.fault_cluster import SCENARIOS, SESSION_TIMEOUT_S, Fault, FaultCluster, until
from tests.faults.history_sender import HistorySender
from tests.faults.stored_ledgers import stored_entries, stored_mark_delete

BACK_WITHIN_S = SESSION_TIMEOUT_S + 15.0
"""The service must be back this soon after a heal (a broker restart takes a few seconds on
a loaded 2-core machine, and a cut bookie is replaced after the 10 s request timeout)."""


@dataclass
class Figures:
    """What a run counted (the acceptance's figures)."""

    faults: dict[str, int] = field(default_factory=dict)
    acked: int = 0
    failed_sends: int = 0
    lost: int = 0
    duplicates: int = 0
    redelivered: int = 0
    dual_writers: int = 0
    problems: list[str] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)

    def line(self) -> str:
        worst = max(self.recovery_s, default=0.0)
        mean = sum(self.recovery_s) / len(self.recovery_s) if self.recovery_s else 0.0
        return (
            f"faults {sum(self.faults.values())} {dict(sorted(self.faults.items()))}; "
            f"acked {self.acked}, failed sends {self.failed_sends}, lost {self.lost}, "
            f"duplicates {self.duplicates}, cursor regressions {self.redelivered}, "
            f"dual-writer moments {self.dual_writers}; recovery after heal mean {mean:.1f} s, "
            f"max {worst:.1f} s (session timeout {SESSION_TIMEOUT_S:.0f} s)"
        )


class AckingConsumer:
    """A consumer of subscription ``acking`` that acknowledges what it receives; reopened
    (a new consumer in the history) each round after the cursor's stored mark-delete is
    read, so a redelivery at or before that durable position shows in the history."""

    def __init__(self, cluster: FaultCluster, client: pulsar.Client, topic: str,
                 history: History) -> None:  # fmt: skip
        self.cluster, self.client, self.topic, self.history = cluster, client, topic, history
        self.consumer: pulsar.Consumer | None = None
        self.record: Consumer | None = None

    def reopen(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(pulsar.PulsarException):
                self.consumer.close()
        mark = asyncio.run(stored_mark_delete(self.cluster.metadata_url, self.topic, "acking"))
        if mark is not None:
            self.history.durable_mark("acking", mark)
        self.consumer = self.client.subscribe(
            self.topic, "acking", initial_position=pulsar.InitialPosition.Earliest
        )
        self.record = self.history.open_consumer("acking")

    def poll(self) -> None:
        """Receive and acknowledge what is there."""
        assert self.consumer is not None and self.record is not None
        while True:
            try:
                msg = self.consumer.receive(timeout_millis=10)
            except pulsar.Timeout:
                return
            position = (msg.message_id().ledger_id(), msg.message_id().entry_id())
            self.history.received(self.record, "checked", msg.data().decode(), position)
            with contextlib.suppress(pulsar.PulsarException):
                self.consumer.acknowledge(msg)


def one_round(
    cluster: FaultCluster, rng: random.Random, name: str, topic: str, sender: HistorySender,
    n: int,
) -> tuple[str, float]:  # fmt: skip
    """Inject fault ``name``, send until it heals, heal it; returns ``name`` and how long
    after the heal the first send made after it was acknowledged."""
    fault = SCENARIOS[name](cluster, rng, topic)
    print(f"round {n}: {fault.name} for {fault.duration_s:.1f} s", flush=True)
    try:
        sender.send_until(until(fault.duration_s))
    finally:
        fault.heal()
    healed = time.monotonic()
    first_after = sender.sent

    def back() -> bool:
        if time.monotonic() - healed > BACK_WITHIN_S + 60:
            raise AssertionError(f"no send acknowledged after healing {fault.name}")
        return sender.last_acked >= first_after

    sender.send_until(back)
    # A copy: the client's callback thread adds to it meanwhile (dict.copy is atomic).
    acked_at = sender.acked_at.copy()
    back_s = min(t for i, t in acked_at.items() if i >= first_after) - healed
    print(f"round {n}: back {back_s:.1f} s after the heal", flush=True)
    if fault.recovered is not None:
        sender.send_until(every(0.2, recovered_within(fault, healed)))
    if fault.expires_session:
        # The cut broker stops once it learns its session expired (unless it kept it):
        # restart it, as a supervisor would, before the next fault.
        stops = until(SESSION_TIMEOUT_S + 5)
        sender.send_until(lambda: stops() or len(cluster.alive()) < len(cluster.brokers))
    cluster.supervise()
    return name, back_s


def recovered_within(fault: Fault, healed: float) -> Callable[[], bool]:
    """``fault.recovered``, raising once it has not held for :data:`BACK_WITHIN_S` after
    the heal."""
    assert fault.recovered is not None
    recovered = fault.recovered

    def check() -> bool:
        if recovered():
            return True
        if time.monotonic() - healed > BACK_WITHIN_S:
            raise AssertionError(f"not recovered {BACK_WITHIN_S:.0f} s after healing {fault.name}")
        return False

    return check


def every(seconds: float, check: Callable[[], bool]) -> Callable[[], bool]:
    """``check``, called at most once per ``seconds`` (False between calls): it costs a
    metadata session, the sender polls far more often."""
    last = [0.0]

    def throttled() -> bool:
        if time.monotonic() - last[0] < seconds:
            return False
        last[0] = time.monotonic()
        return check()

    return throttled


def run_rounds(
    cluster: FaultCluster, topic: str, scenarios: list[str], rounds: int, seed: int
) -> Figures:
    """Inject ``rounds`` faults chosen by ``seed`` among ``scenarios`` and check the history."""
    rng = random.Random(seed)
    figures = Figures()
    history = History()
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=30)
    try:
        audit = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        read_back = history.open_consumer("audit")
        acking = AckingConsumer(cluster, client, topic, history)
        producer = client.create_producer(
            topic, producer_name="checked", batching_enabled=False, send_timeout_millis=120_000
        )
        sender = HistorySender(producer, "checked", history)
        for n in range(rounds):
            acking.reopen()
            sender.send_until(until(rng.uniform(0.2, 1.0)))
            name, back_s = one_round(cluster, rng, rng.choice(scenarios), topic, sender, n)
            figures.faults[name] = figures.faults.get(name, 0) + 1
            figures.recovery_s.append(back_s)
            acking.poll()
        sender.drain()
        cluster.supervise()
        acking.poll()
        last = sender.last_acked
        delivered: set[tuple[int, int]] = set()
        payloads: set[str] = set()
        while str(last) not in payloads:
            try:
                msg = audit.receive(timeout_millis=60_000)
            except pulsar.Timeout:
                break  # what never came is reported as lost by the check
            position = (msg.message_id().ledger_id(), msg.message_id().entry_id())
            # Unacknowledged messages are delivered again after a reconnection (at least
            # once to a consumer); a duplicate stored is another position.
            if position not in delivered:
                delivered.add(position)
                payloads.add(msg.data().decode())
                history.received(read_back, "checked", msg.data().decode())
        figures.acked = len(history.receipted())
        figures.failed_sends = sender.sent - figures.acked
        problems = history.check(read_back, dedup=True)
    finally:
        client.close()
    stored = asyncio.run(stored_entries(cluster.metadata_url, topic))
    dual = history.check_stored(stored, dedup=True)
    figures.problems = problems + dual
    figures.dual_writers = len(dual)
    for line in problems:
        count = int(line.split()[0]) if line.split()[0].isdigit() else 1
        if "never read back" in line:
            figures.lost += count
        elif "more than once" in line:
            figures.duplicates += count
        elif "later consumer" in line:
            figures.redelivered += int(line.split(": ")[1].split()[0])
    return figures
