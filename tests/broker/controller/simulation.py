"""A seeded, in-process cluster for the bundle state machine: brokers joining and dying,
controllers crashing or stalling (a "zombie" that keeps acting on an old epoch), messages
delayed at random but in order on each link (as TCP delivers them), registration watches
that fire late, and a metadata store that fences writes by epoch.

The brokers here follow the contract the real ones must keep: a command is applied only
if its epoch is the store's current controller epoch (the real broker does this with
``fenced_multi`` on ``/controller_epoch`` when it creates or deletes its ownership node),
and a crashed broker's holdings vanish with its session.

:meth:`Simulation.run` raises :class:`AssertionError` on the first broken invariant. A run
depends only on its seed: nothing iterates a set unsorted (string hashing differs between
processes), so a seed replays exactly in another process. Time, links and the run loop are
:mod:`.seeded_cluster`'s.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.broker.controller import (
    AssignBundle,
    BundleBusy,
    BundleId,
    BundleRecord,
    BundleState,
    BundleStateMachine,
    ControllerEffect,
    ControllerPolicy,
    DeleteBundleState,
    InvalidBundle,
    LoadReport,
    NamespaceBundles,
    ReleaseBundle,
    StaleControllerEpoch,
    UnknownBundle,
    WriteBundleState,
    WriteNamespaceBundles,
)

from .seeded_cluster import SESSION_TIMEOUT_MS, ControlledCluster, Controller

NAMESPACES = ["t1/ns1", "t1/ns2", "t2/ns3"]


def _joined(broker: str, machine: BundleStateMachine, now_ms: int) -> list[ControllerEffect]:
    return machine.broker_joined(broker, now_ms)


def _left(broker: str, machine: BundleStateMachine, now_ms: int) -> list[ControllerEffect]:
    return machine.broker_left(broker, now_ms)


@dataclass
class Store:
    """The metadata store as the controller sees it: state written only under the
    current epoch."""

    epoch: int = 0
    namespaces: dict[str, NamespaceBundles] = field(default_factory=dict)
    records: dict[BundleId, BundleRecord] = field(default_factory=dict)
    registrations: set[str] = field(default_factory=set)

    def fenced_apply(self, epoch: int, writes: Sequence[ControllerEffect]) -> bool:
        if epoch != self.epoch:
            return False
        for w in writes:
            if isinstance(w, WriteBundleState):
                assert w.record.epoch == epoch == w.epoch, w
                self.records[w.bundle] = w.record
            elif isinstance(w, WriteNamespaceBundles):
                assert w.epoch == epoch, w
                self.namespaces[w.bundles.namespace] = w.bundles
            elif isinstance(w, DeleteBundleState):
                assert w.epoch == epoch, w
                self.records.pop(w.bundle, None)
        return True


@dataclass
class Broker:
    broker_id: str
    alive: bool = True
    owned: set[BundleId] = field(default_factory=set)


class Simulation(ControlledCluster[BundleStateMachine]):
    store: Store
    ignored_errors = (StaleControllerEpoch, BundleBusy, UnknownBundle, InvalidBundle)

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.store = Store()
        self.brokers: dict[str, Broker] = {}
        self._broker_names = itertools.count(1)
        self.policy = ControllerPolicy(command_retry_ms=2_000)

    def populate(self) -> None:
        for _ in range(2):
            self.join_broker()

    # --- the cluster -----------------------------------------------------------------------

    def join_broker(self) -> None:
        broker = Broker(f"b{next(self._broker_names)}")
        self.brokers[broker.broker_id] = broker
        self.store.registrations.add(broker.broker_id)
        self.watch_fires()
        self.at(self.rng.randint(0, 1000), lambda: self.report(broker))

    def kill_broker(self, broker: Broker) -> None:
        broker.alive = False
        broker.owned.clear()  # its ownership nodes end with its session

        def expire() -> None:
            self.store.registrations.discard(broker.broker_id)
            self.watch_fires()

        self.at(SESSION_TIMEOUT_MS, expire)

    def watch_fires(self) -> None:
        """The controller's registration watch fires late; it re-reads and diffs."""

        def notify() -> None:
            ctl = self.controller
            if ctl is None or not ctl.alive:
                return
            registered = set(self.store.registrations)
            live = ctl.machine.live_brokers
            for joined in sorted(registered - live):
                self.run_on(ctl, functools.partial(_joined, joined))
            for left in sorted(live - registered):
                self.run_on(ctl, functools.partial(_left, left))

        self.at(self.rng.randint(1, 300), notify)

    def new_machine(self, epoch: int) -> BundleStateMachine:
        return BundleStateMachine(
            epoch,
            policy=self.policy,
            namespaces=list(self.store.namespaces.values()),
            records=dict(self.store.records),
            live_brokers=set(self.store.registrations),
        )

    def is_command(self, effect: object) -> bool:
        return isinstance(effect, AssignBundle | ReleaseBundle)

    def dispatch(
        self, ctl: Controller[BundleStateMachine], command: AssignBundle | ReleaseBundle
    ) -> None:
        if isinstance(command, AssignBundle):
            assert command.broker in ctl.machine.live_brokers, (
                f"{command} to a broker the controller knows left"
            )
        self.deliver(command)

    def deliver(self, command: AssignBundle | ReleaseBundle) -> None:
        """Over this controller's own connection to the broker; sometimes the controller
        stalls between its epoch check and the send (a pause, SIGSTOP), so a command can
        arrive long after a newer controller took over."""
        broker = self.brokers[command.broker]
        link = (f"controller-{command.epoch}", broker.broker_id)
        self.stall_link(link)

        def arrive() -> None:
            if not broker.alive or command.epoch != self.store.epoch:
                return  # dead, or a fenced command of a deposed controller
            if isinstance(command, AssignBundle):
                broker.owned.add(command.bundle)
            else:
                broker.owned.discard(command.bundle)
            self.send((broker.broker_id, "controller"), lambda: self.ack(broker, command))

        self.send(link, arrive)

    def ack(self, broker: Broker, command: AssignBundle | ReleaseBundle) -> None:
        ctl = self.controller
        if ctl is None or not broker.alive:
            return
        if isinstance(command, AssignBundle):
            self.run_on(
                ctl,
                lambda m, now: m.ownership_acquired(
                    command.bundle, broker.broker_id, command.epoch, now
                ),
            )
        else:
            self.run_on(
                ctl,
                lambda m, now: m.ownership_released(
                    command.bundle, broker.broker_id, command.epoch, now
                ),
            )

    def report(self, broker: Broker) -> None:
        if not broker.alive:
            return
        cpu = self.rng.uniform(0, 100) if self.chaos else self.rng.uniform(0, 50)
        rates = {b.name: self.rng.uniform(0, 1000) for b in sorted(broker.owned)}
        report = LoadReport(broker.broker_id, self.now_ms, cpu_percent=cpu, bundle_msg_rates=rates)
        ctl = self.controller
        if ctl is not None:
            self.send(
                (broker.broker_id, "controller"),
                lambda: self.run_on(ctl, lambda m, now: m.load_reported(report, now)),
            )
        self.at(2_000, lambda: self.report(broker))

    def chaos_step(self) -> None:
        if not self.chaos:
            return
        live = [b for b in self.brokers.values() if b.alive]
        roll = self.rng.random()
        ctl = self.controller
        if roll < 0.08 and len(live) < 6:
            self.join_broker()
        elif roll < 0.14 and live:
            self.kill_broker(self.rng.choice(live))
        elif roll < 0.17 and ctl is not None and ctl.alive and not self.electing:
            if self.rng.random() < 0.5:
                ctl.alive = False  # crashed
            else:
                self.zombies.append(ctl)  # stalled past its session: still acting
            self.controller = None
            self.elect()
        elif roll < 0.55 and ctl is not None:
            ns = self.rng.choice(NAMESPACES)
            topic = f"persistent://{ns}/topic-{self.rng.randint(0, 50)}"
            self.run_on(ctl, lambda m, now: m.lookup(topic, now))
        elif roll < 0.65 and ctl is not None:
            bundles = [b for ns in ctl.machine.namespaces for b in ns.bundles]
            if bundles:
                bundle = self.rng.choice(bundles)
                if self.rng.random() < 0.7:
                    self.run_on(ctl, lambda m, now: m.unload_requested(bundle, now))
                elif len(bundles) < 24:
                    self.run_on(ctl, lambda m, now: m.split_requested(bundle, now))
        self.at(self.rng.randint(50, 600), self.chaos_step)

    def calm(self) -> None:
        """End of chaos: make sure a broker lives; no more deaths, moves or failovers."""
        self.chaos = False
        if not any(b.alive for b in self.brokers.values()):
            self.join_broker()

    def fingerprint(self) -> str:
        """The end state, to compare runs of one seed."""
        records = sorted(
            (b.name, r.state.value, r.broker, r.epoch) for b, r in self.store.records.items()
        )
        return repr((self.store.epoch, self.events, self.dropped, records))

    # --- invariants ------------------------------------------------------------------------

    def check_safety(self) -> None:
        holders: dict[BundleId, str] = {}
        for broker in self.brokers.values():
            if not broker.alive:
                continue
            for bundle in broker.owned:
                other = holders.setdefault(bundle, broker.broker_id)
                assert other == broker.broker_id, (
                    f"t={self.now_ms}ms: {bundle} held by {other} and {broker.broker_id}"
                )
        for bundle, record in self.store.records.items():
            assert record.epoch <= self.store.epoch, (bundle, record)

    def check_settled(self) -> None:
        ctl = self.controller
        assert ctl is not None and ctl.alive, "no controller at the end"
        live = {b.broker_id for b in self.brokers.values() if b.alive}
        assert live, "no broker lives at the end"
        assert ctl.machine.live_brokers == live, (ctl.machine.live_brokers, live)
        for ns in self.store.namespaces.values():
            assert ctl.machine.namespace(ns.namespace) == ns
            for bundle in ns.bundles:
                record = self.store.records.get(bundle)
                assert record is not None and record.state is BundleState.OWNED, (
                    f"{bundle} is {record} at the end"
                )
                assert record.broker in live, f"{bundle} owned by dead {record.broker}"
                assert bundle in self.brokers[record.broker].owned, (
                    f"{bundle}: {record.broker} does not serve it"
                )
