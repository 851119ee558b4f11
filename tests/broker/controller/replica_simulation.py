"""A seeded, in-process cluster for the ledger replica state machine: bookies that crash and
come back with their data, die for good, or join new; writers that append to ledgers,
replace failed bookies (ensemble change), close their ledgers or crash (then recovery closes
them); ledgers deleted; replication workers that copy entries for real (between the
simulated bookies' entry sets) and sometimes fail; controllers that crash or stall and act
on their old epoch; messages delayed in order per link and sometimes lost; watches that fire
late.

The replication workers run :func:`magnetar.ledger.fragments.plan_rereplication` and
:func:`~magnetar.ledger.fragments.replace_replica` as a real worker would, and ignore the
task's epoch: data safety must come from the compare-and-set on ledger metadata alone.

:meth:`ReplicaSimulation.run` raises :class:`AssertionError` on the first broken invariant:

* a task targets a bookie the controller knows left, or one in the fragment's ensemble;
* metadata names a bookie for an entry it does not hold (a copy published before done);
* a persisted record or effect ahead of or behind the controller's epoch;
* at the end (enough bookies live, nothing lost for good): every ledger closed, every
  fragment on live bookies holding every entry of their write sets, no state left.

A run depends only on its seed (nothing iterates a set unsorted). Time, links and the run
loop are :mod:`.seeded_cluster`'s.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from magnetar.broker.controller import (
    DeleteReplicaState,
    ReplicaEffect,
    ReplicaPolicy,
    ReplicaRecord,
    ReplicaStateMachine,
    ReplicateFragment,
    WriteReplicaState,
)
from magnetar.ledger.fragments import (
    FragmentChanged,
    fragment_at,
    fragments_of,
    missing_replicas,
    plan_rereplication,
    replace_replica,
)
from magnetar.ledger.metadata import LedgerMetadata, LedgerState

from .seeded_cluster import SESSION_TIMEOUT_MS, ControlledCluster, Controller

WORKER_FAILURE_PROBABILITY = 0.15
COPY_MS_MAX = 1_500
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 3, 2, 2
ENTRIES_PER_LEDGER_MAX = 12
LIVE_BOOKIES_MIN_AT_END = 4
BOOKIES_MAX = 8
LEDGERS_OPEN_MAX = 6


def _joined(bookie: str, machine: ReplicaStateMachine, now_ms: int) -> list[ReplicaEffect]:
    return machine.bookie_joined(bookie, now_ms)


def _left(bookie: str, machine: ReplicaStateMachine, now_ms: int) -> list[ReplicaEffect]:
    return machine.bookie_left(bookie, now_ms)


@dataclass
class Bookie:
    name: str
    alive: bool = True
    entries: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class Writer:
    ledger_id: int
    alive: bool = True
    next_entry: int = 0
    entries_max: int = 0


@dataclass
class Store:
    epoch: int = 0
    ledgers: dict[int, tuple[LedgerMetadata, int]] = field(default_factory=dict)
    records: dict[int, ReplicaRecord] = field(default_factory=dict)
    registrations: set[str] = field(default_factory=set)

    def fenced_apply(self, epoch: int, writes: Sequence[ReplicaEffect]) -> bool:
        if epoch != self.epoch:
            return False
        for w in writes:
            if isinstance(w, WriteReplicaState):
                assert w.record.epoch == epoch == w.epoch, w
                previous = self.records.get(w.ledger_id)
                assert previous is None or previous.epoch <= epoch, (previous, w)
                self.records[w.ledger_id] = w.record
            elif isinstance(w, DeleteReplicaState):
                assert w.epoch == epoch, w
                self.records.pop(w.ledger_id, None)
        return True


class ReplicaSimulation(ControlledCluster[ReplicaStateMachine]):
    store: Store
    settle_ms = 90_000

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.store = Store()
        self.bookies: dict[str, Bookie] = {}
        self._bookie_names = itertools.count(1)
        self._ledger_ids = itertools.count(1)
        self.writers: dict[int, Writer] = {}
        self.written_last: dict[int, int] = {}
        """Last entry written per ledger (its writer may have crashed, the ledger still open)."""
        self.replicated = 0
        self.failed = 0
        self.policy = ReplicaPolicy(
            tasks_in_flight_max=4,
            task_timeout_ms=6_000,
            retry_backoff_initial_ms=500,
            retry_backoff_max_ms=4_000,
        )

    def populate(self) -> None:
        for _ in range(4):
            self.join_bookie()

    # --- bookies ---------------------------------------------------------------------------

    def alive_bookies(self) -> list[str]:
        return sorted(b.name for b in self.bookies.values() if b.alive)

    def join_bookie(self) -> None:
        bookie = Bookie(f"bk{next(self._bookie_names)}")
        self.bookies[bookie.name] = bookie
        self.register(bookie)

    def register(self, bookie: Bookie) -> None:
        bookie.alive = True
        self.store.registrations.add(bookie.name)
        self.registrations_watch()

    def crash_bookie(self, bookie: Bookie, restart_ms: int | None) -> None:
        """The process stops; its registration ends with its session; with ``restart_ms``
        it comes back with its data (a restart), else never (its disk is gone)."""
        bookie.alive = False

        def expire() -> None:
            if not bookie.alive:
                self.store.registrations.discard(bookie.name)
                self.registrations_watch()

        self.at(SESSION_TIMEOUT_MS, expire)
        if restart_ms is not None:
            self.at(restart_ms, lambda: self.register(bookie))

    def may_lose_for_good(self, bookie: Bookie) -> bool:
        """Only if every entry the metadata places on it has another replica named by the
        metadata on a running bookie (the scenario keeps data recoverable; losing the last
        copy is not autorecovery's test). A copy the metadata does not name (left by a
        worker whose CAS failed) does not count: no reader or worker looks there."""
        for ledger_id, (md, _) in sorted(self.store.ledgers.items()):
            written_last = self.written_last.get(ledger_id, -1)
            for fragment in fragments_of(md):
                if bookie.name not in fragment.ensemble:
                    continue
                index = fragment.ensemble.index(bookie.name)
                last = fragment.last_entry if fragment.sealed else written_last
                assert last is not None
                for entry in range(fragment.first_entry, last + 1):
                    write_set = md.write_set(entry)
                    if index not in write_set:
                        continue
                    others = [self.bookies[fragment.ensemble[i]] for i in write_set if i != index]
                    if not any(o.alive and (ledger_id, entry) in o.entries for o in others):
                        return False
        return True

    def registrations_watch(self) -> None:
        def notify() -> None:
            ctl = self.controller
            if ctl is None or not ctl.alive:
                return
            registered = set(self.store.registrations)
            live = ctl.machine.live_bookies
            for joined in sorted(registered - live):
                self.run_on(ctl, functools.partial(_joined, joined))
            for left in sorted(live - registered):
                self.run_on(ctl, functools.partial(_left, left))

        self.at(self.rng.randint(1, 300), notify)

    # --- ledgers and their writers -------------------------------------------------------------

    def put_ledger(self, metadata: LedgerMetadata) -> int:
        """Write ledger metadata (the caller read it just now: a CAS that succeeds), check
        that it names only bookies holding their entries, and fire the watch."""
        _, version = self.store.ledgers.get(metadata.ledger_id, (metadata, -1))
        version += 1
        self.store.ledgers[metadata.ledger_id] = (metadata, version)
        self.check_ledger_data(metadata)
        self.ledger_watch(metadata.ledger_id)
        return version

    def ledger_watch(self, ledger_id: int) -> None:
        def notify() -> None:
            ctl = self.controller
            if ctl is None or not ctl.alive:
                return
            current = self.store.ledgers.get(ledger_id)
            if current is None:
                self.run_on(ctl, lambda m, now: m.ledger_deleted(ledger_id, now))
            else:
                md, version = current
                self.run_on(ctl, lambda m, now: m.ledger_changed(md, version, now))

        self.at(self.rng.randint(1, 300), notify)

    def create_ledger(self) -> None:
        alive = [b for b in self.alive_bookies() if b in self.store.registrations]
        if len(alive) < ENSEMBLE:
            return
        ledger_id = next(self._ledger_ids)
        ensemble = tuple(self.rng.sample(alive, ENSEMBLE))
        md = LedgerMetadata(ledger_id, ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, ((0, ensemble),))
        self.put_ledger(md)
        writer = Writer(ledger_id, entries_max=self.rng.randint(0, ENTRIES_PER_LEDGER_MAX))
        self.writers[ledger_id] = writer
        self.at(self.rng.randint(50, 500), lambda: self.write_step(writer))

    def write_step(self, writer: Writer) -> None:
        """Append one entry (after an ensemble change if a bookie of its write set is
        down), or close the ledger once it has its entries."""
        if not writer.alive or writer.ledger_id not in self.store.ledgers:
            return
        md, _ = self.store.ledgers[writer.ledger_id]
        if writer.next_entry >= writer.entries_max:
            self.put_ledger(
                replace(md, state=LedgerState.CLOSED, last_entry_id=writer.next_entry - 1)
            )
            self.writers.pop(writer.ledger_id, None)
            return
        entry = writer.next_entry
        ensemble = list(md.current_ensemble)
        down = [i for i in md.write_set(entry) if not self.bookies[ensemble[i]].alive]
        if down:
            spare = [b for b in self.alive_bookies() if b not in ensemble]
            if len(spare) < len(down):
                self.at(500, lambda: self.write_step(writer))  # not enough bookies: wait
                return
            for i, new in zip(down, self.rng.sample(spare, len(down)), strict=True):
                ensemble[i] = new
            md = md.with_ensemble(entry, tuple(ensemble))
        for i in md.write_set(entry):
            self.bookies[ensemble[i]].entries.add((writer.ledger_id, entry))
        writer.next_entry += 1
        self.written_last[writer.ledger_id] = entry
        if down:
            self.put_ledger(md)  # the entry is on its new write set before it is named
        self.at(self.rng.randint(100, 800), lambda: self.write_step(writer))

    def crash_writer(self, writer: Writer) -> None:
        """The writer dies; later a recovery closes the ledger at its last written entry
        (every entry here reached its whole write set)."""
        writer.alive = False
        self.writers.pop(writer.ledger_id, None)

        def recover() -> None:
            current = self.store.ledgers.get(writer.ledger_id)
            if current is not None and current[0].state is not LedgerState.CLOSED:
                md = current[0]
                self.put_ledger(
                    replace(md, state=LedgerState.CLOSED, last_entry_id=writer.next_entry - 1)
                )

        self.at(self.rng.randint(1_000, 8_000), recover)

    def delete_ledger(self, ledger_id: int) -> None:
        del self.store.ledgers[ledger_id]
        self.written_last.pop(ledger_id, None)
        for bookie in self.bookies.values():
            bookie.entries = {k for k in bookie.entries if k[0] != ledger_id}
        self.ledger_watch(ledger_id)

    # --- the controller ----------------------------------------------------------------------

    def new_machine(self, epoch: int) -> ReplicaStateMachine:
        return ReplicaStateMachine(
            epoch,
            policy=self.policy,
            ledgers=dict(self.store.ledgers),
            records=dict(self.store.records),
            live_bookies=set(self.store.registrations),
        )

    def is_command(self, effect: object) -> bool:
        return isinstance(effect, ReplicateFragment)

    def dispatch(self, ctl: Controller[ReplicaStateMachine], task: ReplicateFragment) -> None:
        self.check_task(ctl, task)
        self.send(
            (f"controller-{ctl.epoch}", task.target_bookie),
            functools.partial(self.work, task),
            stall=True,
        )

    def check_task(self, ctl: Controller[ReplicaStateMachine], task: ReplicateFragment) -> None:
        machine = ctl.machine
        assert task.target_bookie in machine.live_bookies, f"{task} to a departed bookie"
        assert task.missing_bookie not in machine.live_bookies, f"{task} for a live bookie"
        md = machine.metadata(task.ledger_id)
        assert md is not None, task
        fragment = fragment_at(md, task.first_entry)
        assert fragment is not None and fragment.sealed, (task, md)
        assert task.target_bookie not in fragment.ensemble, f"{task} into {fragment.ensemble}"
        assert fragment.ensemble[task.bookie_index] == task.missing_bookie, (task, fragment)

    def answer(self, task: ReplicateFragment, done: bool) -> None:
        def deliver() -> None:
            ctl = self.controller
            if ctl is None or not ctl.alive:
                return
            if done:
                current = self.store.ledgers.get(task.ledger_id)
                if current is None:
                    return
                md, version = current
                self.run_on(ctl, lambda m, now: m.fragment_replicated(task, md, version, now))
            else:
                self.run_on(ctl, lambda m, now: m.fragment_failed(task, now))

        self.send((task.target_bookie, "controller"), deliver)

    # --- the replication worker (on the target bookie) -------------------------------------

    def work(self, task: ReplicateFragment) -> None:
        target = self.bookies[task.target_bookie]
        if not target.alive:
            return  # the command died with the process; the controller times it out
        current = self.store.ledgers.get(task.ledger_id)
        if current is None:
            return self.answer(task, done=False)
        try:
            plan = plan_rereplication(
                current[0],
                task.first_entry,
                task.bookie_index,
                task.missing_bookie,
                task.target_bookie,
            )
        except (FragmentChanged, ValueError):
            return self.answer(task, done=False)
        if plan is None:
            return self.answer(task, done=True)  # already replaced
        if self.chaos and self.rng.random() < WORKER_FAILURE_PROBABILITY:
            return self.answer(task, done=False)
        copied: list[tuple[int, int]] = []
        for entry in plan.entries():
            key = (task.ledger_id, entry)
            if not any(
                self.bookies[s].alive and key in self.bookies[s].entries
                for s in plan.sources(entry)
            ):
                return self.answer(task, done=False)  # no surviving replica answers now
            copied.append(key)

        def publish() -> None:
            if not target.alive:
                return
            now = self.store.ledgers.get(task.ledger_id)
            if now is None:
                return self.answer(task, done=False)
            target.entries.update(copied)
            try:
                new_md = replace_replica(now[0], plan)
            except FragmentChanged:
                return self.answer(task, done=False)
            self.put_ledger(new_md)
            self.replicated += 1
            self.answer(task, done=True)

        self.at(self.rng.randint(10, COPY_MS_MAX), publish)

    # --- the run ---------------------------------------------------------------------------

    def chaos_step(self) -> None:
        if not self.chaos:
            return
        roll = self.rng.random()
        alive = [self.bookies[b] for b in self.alive_bookies()]
        ctl = self.controller
        open_writers = [self.writers[w] for w in sorted(self.writers)]
        if roll < 0.07 and len(self.bookies) < BOOKIES_MAX:
            self.join_bookie()
        elif roll < 0.17 and len(alive) > 1:
            victim = self.rng.choice(alive)
            if self.rng.random() < 0.5 and self.may_lose_for_good(victim):
                self.crash_bookie(victim, restart_ms=None)
            else:
                self.crash_bookie(victim, restart_ms=self.rng.randint(1_000, 10_000))
        elif roll < 0.20 and ctl is not None and ctl.alive and not self.electing:
            if self.rng.random() < 0.5:
                ctl.alive = False
            else:
                self.zombies.append(ctl)
            self.controller = None
            self.elect()
        elif roll < 0.45 and len(open_writers) < LEDGERS_OPEN_MAX:
            self.create_ledger()
        elif roll < 0.50 and open_writers:
            self.crash_writer(self.rng.choice(open_writers))
        elif roll < 0.55:
            closed = [
                lid
                for lid, (md, _) in sorted(self.store.ledgers.items())
                if md.state is LedgerState.CLOSED
            ]
            if closed:
                self.delete_ledger(self.rng.choice(closed))
        self.at(self.rng.randint(50, 600), self.chaos_step)

    def calm(self) -> None:
        """End of chaos: no more deaths, failures or failovers; enough bookies live."""
        self.chaos = False
        running = len(self.alive_bookies())
        for _ in range(LIVE_BOOKIES_MIN_AT_END - running):
            self.join_bookie()
        if self.controller is None and not self.electing:
            self.elect()

    def fingerprint(self) -> str:
        ledgers = sorted((lid, md.to_bytes(), v) for lid, (md, v) in self.store.ledgers.items())
        records = sorted((lid, r.to_bytes()) for lid, r in self.store.records.items())
        return repr((self.store.epoch, self.events, self.replicated, ledgers, records))

    # --- invariants ------------------------------------------------------------------------

    def check_ledger_data(self, md: LedgerMetadata) -> None:
        """Every bookie the metadata names holds every entry of its write sets (written
        entries only for the writer's fragment)."""
        written_last = self.written_last.get(md.ledger_id, -1)
        for fragment in fragments_of(md):
            last = fragment.last_entry if fragment.sealed else written_last
            assert last is not None
            for entry in range(fragment.first_entry, last + 1):
                for i in md.write_set(entry):
                    bookie = fragment.ensemble[i]
                    assert (md.ledger_id, entry) in self.bookies[bookie].entries, (
                        f"ledger {md.ledger_id} names {bookie} for entry {entry} it lacks"
                    )

    def check_safety(self) -> None:
        for ledger_id, record in self.store.records.items():
            assert record.epoch <= self.store.epoch, (ledger_id, record)

    def check_settled(self) -> None:
        ctl = self.controller
        assert ctl is not None and ctl.alive, "no controller at the end"
        live = set(self.alive_bookies())
        assert live == self.store.registrations
        assert ctl.machine.live_bookies == live, (ctl.machine.live_bookies, live)
        for ledger_id, (md, _) in sorted(self.store.ledgers.items()):
            assert md.state is LedgerState.CLOSED, f"ledger {ledger_id} still {md.state}"
            missing = missing_replicas(md, live)
            assert not missing, f"ledger {ledger_id} misses replicas {missing} at the end"
            self.check_ledger_data(md)
            assert ctl.machine.metadata(ledger_id) == md, f"ledger {ledger_id}: stale view"
        assert self.store.records == {}, f"states left: {self.store.records}"
        assert ctl.machine.records == {} and ctl.machine.tasks_in_flight == []
