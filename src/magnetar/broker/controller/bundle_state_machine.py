"""The controller's bundle state machine (Kafka's partition state machine), sans-IO.

:class:`BundleStateMachine` takes events — broker joined / left (its registration appeared /
vanished), load report, lookup, ownership acquired / released acknowledgements, unload and
split requests, a newer controller epoch, clock ticks — each with the caller's clock
reading ``now_ms``, and returns *effects* for the shell to execute in order:

* :class:`WriteNamespaceBundles`, :class:`WriteBundleState`, :class:`DeleteBundleState` —
  metadata writes; the shell applies all writes of one call in one transaction fenced by the
  epoch, *before* sending any command of the same call;
* :class:`AssignBundle`, :class:`ReleaseBundle` — commands to one broker.

Every effect carries the controller's epoch. A machine is built for one epoch: inputs
stamped with an older epoch raise :class:`StaleControllerEpoch`; once it has seen a newer
epoch (:meth:`BundleStateMachine.epoch_changed`) every input raises
:class:`ControllerDeposed`.

Rules (see :mod:`.bundle_state` for the states):

* Every bundle of a namespace the controller knows is kept assigned while a broker lives:
  a namespace becomes known through :meth:`~BundleStateMachine.namespace_added` or the
  first lookup of one of its topics (with the default bundles).
* A bundle is assigned to the best live broker by :func:`.load.rank_brokers`, avoiding the
  broker it was just moved off when any other broker lives. A bundle placed afresh (a new
  namespace's, a dead broker's) goes first to a broker holding fewest of its
  namespace's bundles; one moved off a broker (unloaded, shed, rebalanced) goes to one
  holding fewest bundles, so each count-rebalancing move narrows the spread and the moves
  end.
* A bundle goes back to UNASSIGNED only when its broker acknowledged the release or left
  (its ephemeral ownership node went with its session), or when the controller sees that
  the broker of an OWNED bundle holds no ownership node for it
  (:meth:`~BundleStateMachine.ownership_lost`: a broker restarted under the same id, or a
  record resumed from an older epoch that its broker can no longer act on): never two
  brokers at once.
* A broker that leaves loses every bundle it held or was being given; they are reassigned.
* Namespace isolation (``policy.broker_candidates``, :mod:`.isolation`): a bundle goes only
  to a broker that may own its namespace; with none alive it stays UNASSIGNED, and
  shedding and rebalancing leave alone a bundle with nowhere else to go.
* Commands not acknowledged within ``command_retry_ms`` are sent again (brokers treat a
  repeated command as a no-op).
* Load shedding: each tick, an overloaded broker (by its last report) with a report newer
  than its last shedding gives up its busiest OWNED bundle, while some live broker is not
  overloaded; at most ``shed_moves_per_tick_max`` bundles per tick.
* Count rebalancing (expansion without copying data): each tick with nothing shed and no
  bundle ASSIGNING or RELEASING, if the broker with most bundles holds more than
  ``load.rebalance_count_spread_max`` more than a not-overloaded one with fewest, its
  busiest OWNED bundle (by its report; among equals, one of the namespace it holds most
  of) owned for at least ``load.rebalance_owned_min_ms`` is unloaded and goes to the one
  with fewest: one move at a time over the cluster, and a bundle just placed (a manual
  unload, a failover) is not moved straight on.
* Split: an UNASSIGNED bundle splits at once; an OWNED one is released first and split
  once released; a bundle in transition raises :class:`BundleBusy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from magnetar.broker.controller.bundle_state import BundleRecord, BundleState
from magnetar.broker.controller.bundles import (
    DEFAULT_BUNDLE_COUNT,
    BundleId,
    NamespaceBundles,
)
from magnetar.broker.controller.epoch_fence import EpochFenced
from magnetar.broker.controller.errors import (
    BundleBusy,
    NamespaceLimitReached,
    UnknownBundle,
)
from magnetar.broker.controller.load import LoadPolicy, LoadReport, rank_brokers
from magnetar.common.names import TopicName

DEFAULT_COMMAND_RETRY_MS = 5_000
DEFAULT_NAMESPACES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class WriteNamespaceBundles:
    """Persist a namespace's bundle boundaries."""

    bundles: NamespaceBundles
    epoch: int


@dataclass(frozen=True, slots=True)
class WriteBundleState:
    """Persist ``record`` as the state of ``bundle`` (``record.epoch == epoch``)."""

    bundle: BundleId
    record: BundleRecord
    epoch: int


@dataclass(frozen=True, slots=True)
class DeleteBundleState:
    """Remove the persisted state of a bundle that no longer exists (it was split)."""

    bundle: BundleId
    epoch: int


@dataclass(frozen=True, slots=True)
class AssignBundle:
    """Tell ``broker`` to acquire ``bundle`` and answer :meth:`~BundleStateMachine
    .ownership_acquired` stamped with ``epoch``."""

    bundle: BundleId
    broker: str
    epoch: int


@dataclass(frozen=True, slots=True)
class ReleaseBundle:
    """Tell ``broker`` to stop serving ``bundle``, give up its ownership node and answer
    :meth:`~BundleStateMachine.ownership_released` stamped with ``epoch``."""

    bundle: BundleId
    broker: str
    epoch: int


MetadataWrite = WriteNamespaceBundles | WriteBundleState | DeleteBundleState
BrokerCommand = AssignBundle | ReleaseBundle
ControllerEffect = MetadataWrite | BrokerCommand


@dataclass(frozen=True, slots=True)
class ControllerPolicy:
    command_retry_ms: int = DEFAULT_COMMAND_RETRY_MS
    default_bundle_count: int = DEFAULT_BUNDLE_COUNT
    namespaces_max: int = DEFAULT_NAMESPACES_MAX
    """Bound on namespaces tracked (each costs a node per bundle in the metadata store);
    the caller should only look up topics of namespaces that exist (admin policies)."""
    load: LoadPolicy = field(default_factory=LoadPolicy)
    broker_candidates: BrokerCandidates | None = None
    """Which of the live brokers may own a bundle of a namespace (namespace isolation,
    :meth:`.isolation.BrokerIsolation.candidates`); None: every live broker. Assignment,
    load shedding and rebalancing move a bundle only to one of them; a bundle none may own
    stays UNASSIGNED."""


BrokerCandidates = Callable[[str, frozenset[str]], frozenset[str]]
"""``(namespace, live brokers) -> the live brokers that may own its bundles``."""


class BundleStateMachine(EpochFenced[ControllerEffect]):
    """Bundle states of every known namespace, for the controller of one ``epoch``.

    Construct it with what the previous controllers persisted (``namespaces``, ``records``)
    and the brokers registered now, then call :meth:`start` once and run its effects. Raises
    :class:`StaleControllerEpoch` if a record was written at a newer epoch, and
    :class:`UnknownBundle` for a record of a bundle not in ``namespaces``.
    """

    def __init__(
        self,
        epoch: int,
        *,
        policy: ControllerPolicy | None = None,
        namespaces: Iterable[NamespaceBundles] = (),
        records: Mapping[BundleId, BundleRecord] | None = None,
        live_brokers: Iterable[str] = (),
    ) -> None:
        super().__init__(epoch)
        self.policy = policy or ControllerPolicy()
        self._namespaces: dict[str, NamespaceBundles] = {ns.namespace: ns for ns in namespaces}
        self._records: dict[BundleId, BundleRecord] = {}
        self._live: set[str] = set(live_brokers)
        self._reports: dict[str, LoadReport] = {}
        self._last_sent_ms: dict[BundleId, int] = {}
        self._last_shed_ms: dict[str, int] = {}
        for bundle, record in (records or {}).items():
            self._check_resumable(f"bundle {bundle}", record.epoch)
            ns = self._namespaces.get(bundle.namespace)
            if ns is None or not ns.contains(bundle):
                raise UnknownBundle(f"a state for {bundle}, not a bundle of its namespace")
            self._records[bundle] = record

    # --- queries -------------------------------------------------------------------------

    @property
    def live_brokers(self) -> frozenset[str]:
        return frozenset(self._live)

    def namespace(self, namespace: str) -> NamespaceBundles | None:
        return self._namespaces.get(namespace)

    @property
    def namespaces(self) -> list[NamespaceBundles]:
        return [self._namespaces[n] for n in sorted(self._namespaces)]

    def record(self, bundle: BundleId) -> BundleRecord:
        """The bundle's state; UNASSIGNED at this epoch for a bundle with none stored."""
        record = self._records.get(bundle)
        if record is None:
            return BundleRecord(BundleState.UNASSIGNED, None, self.epoch, 0)
        return record

    @property
    def records(self) -> dict[BundleId, BundleRecord]:
        """Every bundle of every known namespace with its state (a copy)."""
        return {b: self.record(b) for ns in self.namespaces for b in ns.bundles}

    def owner_of(self, bundle: BundleId) -> str | None:
        """The broker serving ``bundle`` for lookups: its OWNED broker, else ``None``."""
        record = self._records.get(bundle)
        if record is not None and record.state is BundleState.OWNED:
            return record.broker
        return None

    def bundle_of(self, topic: TopicName | str) -> BundleId | None:
        """The bundle of ``topic`` if its namespace is known."""
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        ns = self._namespaces.get(str(name.namespace_name))
        return None if ns is None else ns.bundle_for_topic(name)

    # --- events --------------------------------------------------------------------------

    def start(self, now_ms: int) -> list[ControllerEffect]:
        """Take over the persisted states: bundles of brokers no longer registered become
        UNASSIGNED; commands in flight are restamped with this epoch and sent again;
        unassigned bundles are assigned. Call once, before any other event."""
        self._begin_start()
        effects: list[ControllerEffect] = []
        for bundle in sorted(self._records):
            record = self._records[bundle]
            if record.state is BundleState.UNASSIGNED:
                continue
            if record.broker not in self._live:
                self._unassign(bundle, now_ms, effects)
            elif record.state in (BundleState.ASSIGNING, BundleState.RELEASING):
                self._put(bundle, replace(record, epoch=self.epoch), effects)
                self._send(bundle, now_ms, effects)
        self._assign_unassigned(now_ms, effects)
        return effects

    def broker_joined(self, broker: str, now_ms: int) -> list[ControllerEffect]:
        self._check_alive()
        if broker in self._live:
            return []
        self._live.add(broker)
        effects: list[ControllerEffect] = []
        self._assign_unassigned(now_ms, effects)
        return effects

    def broker_left(self, broker: str, now_ms: int) -> list[ControllerEffect]:
        """The broker's registration vanished: its session ended, and with it every
        ownership node it held."""
        self._check_alive()
        if broker not in self._live:
            return []
        self._live.discard(broker)
        self._reports.pop(broker, None)
        self._last_shed_ms.pop(broker, None)
        effects: list[ControllerEffect] = []
        for bundle in sorted(self._records):
            if self._records[bundle].broker == broker:
                self._unassign(bundle, now_ms, effects)
        self._assign_unassigned(now_ms, effects)
        return effects

    def load_reported(self, report: LoadReport, now_ms: int) -> list[ControllerEffect]:
        """Keep the broker's latest report (older or unknown brokers' reports are dropped)."""
        self._check_alive()
        previous = self._reports.get(report.broker)
        if report.broker in self._live and (
            previous is None or report.reported_ms >= previous.reported_ms
        ):
            self._reports[report.broker] = report
        return []

    def namespace_added(self, bundles: NamespaceBundles, now_ms: int) -> list[ControllerEffect]:
        """Make a namespace known (its bundles are persisted and assigned). A namespace
        already known keeps its current bundles. Raises :class:`NamespaceLimitReached`
        beyond ``namespaces_max``."""
        self._check_alive()
        if bundles.namespace in self._namespaces:
            return []
        if len(self._namespaces) >= self.policy.namespaces_max:
            raise NamespaceLimitReached(
                f"the controller tracks {len(self._namespaces)} namespaces, the most allowed"
            )
        self._namespaces[bundles.namespace] = bundles
        effects: list[ControllerEffect] = [WriteNamespaceBundles(bundles, self.epoch)]
        self._assign_unassigned(now_ms, effects)
        return effects

    def lookup(self, topic: TopicName | str, now_ms: int) -> list[ControllerEffect]:
        """A lookup of ``topic``: makes its namespace known (default bundles) so its bundle
        gets assigned. The answer is :meth:`owner_of` once the bundle is OWNED."""
        self._check_alive()
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        namespace = str(name.namespace_name)
        if namespace not in self._namespaces:
            return self.namespace_added(
                NamespaceBundles.default(namespace, self.policy.default_bundle_count), now_ms
            )
        effects: list[ControllerEffect] = []
        self._assign_unassigned(now_ms, effects)
        return effects

    def ownership_acquired(
        self, bundle: BundleId, broker: str, epoch: int, now_ms: int
    ) -> list[ControllerEffect]:
        """``broker`` acknowledged :class:`AssignBundle` of ``epoch``."""
        self._check_epoch(epoch)
        if broker not in self._live:
            return []  # it left: its ownership node is gone with its session
        record = self._records.get(bundle)
        if record is None or not self._known(bundle):
            return [ReleaseBundle(bundle, broker, self.epoch)]
        if record.broker != broker:
            # Holds a bundle that is not (or no longer) its own: make it let go. The
            # record is untouched, so the bundle's current holder is not disturbed.
            return [ReleaseBundle(bundle, broker, self.epoch)]
        if record.state is not BundleState.ASSIGNING:
            return []  # a repeated ack (OWNED), or a release already under way
        effects: list[ControllerEffect] = []
        owned = record.moved(BundleState.OWNED, broker, self.epoch, now_ms)
        self._put(bundle, replace(owned, avoid_broker=None), effects)
        self._last_sent_ms.pop(bundle, None)
        return effects

    def ownership_released(
        self, bundle: BundleId, broker: str, epoch: int, now_ms: int
    ) -> list[ControllerEffect]:
        """``broker`` acknowledged :class:`ReleaseBundle` of ``epoch``: it serves
        ``bundle`` no more and its ownership node is gone."""
        self._check_epoch(epoch)
        record = self._records.get(bundle)
        if record is None or record.broker != broker or record.state is not BundleState.RELEASING:
            return []
        effects: list[ControllerEffect] = []
        self._unassign(bundle, now_ms, effects)
        self._assign_unassigned(now_ms, effects)
        return effects

    def ownership_lost(self, bundle: BundleId, broker: str, now_ms: int) -> list[ControllerEffect]:
        """The controller observes *now* that ``broker`` holds no ownership node for
        ``bundle``. If the bundle is OWNED by ``broker`` it is served by nobody: it becomes
        UNASSIGNED and is assigned again at this epoch. Otherwise nothing changes.

        Call it only with an observation made after this machine's last acknowledgement
        for the bundle (never a delayed message): the node of an OWNED bundle can go
        without a release when its broker's session ended but the same broker id
        registered again before the controller saw it leave, or when a new controller
        resumes an OWNED record whose broker restarted and holds nothing — that broker
        refuses the record's older epoch, so without this the bundle stays unserved."""
        self._check_alive()
        record = self._records.get(bundle)
        if record is None or record.broker != broker or record.state is not BundleState.OWNED:
            return []
        effects: list[ControllerEffect] = []
        self._unassign(bundle, now_ms, effects)
        self._assign_unassigned(now_ms, effects)
        return effects

    def unload_requested(self, bundle: BundleId, now_ms: int) -> list[ControllerEffect]:
        """Move ``bundle`` off its broker (to another when one lives). An unowned bundle
        needs nothing. Raises :class:`UnknownBundle`, :class:`BundleBusy` (in transition)."""
        self._check_alive()
        if not self._known(bundle):
            raise UnknownBundle(f"{bundle} is not a current bundle")
        record = self.record(bundle)
        if record.state is BundleState.UNASSIGNED:
            return []
        if record.state is not BundleState.OWNED:
            raise BundleBusy(f"{bundle} is {record.state.value}")
        effects: list[ControllerEffect] = []
        self._release(bundle, now_ms, effects)
        return effects

    def split_requested(self, bundle: BundleId, now_ms: int) -> list[ControllerEffect]:
        """Split ``bundle`` in two (see the module docstring). Raises
        :class:`UnknownBundle`, :class:`BundleBusy`, :class:`~.bundles.InvalidBundle`."""
        self._check_alive()
        if not self._known(bundle):
            raise UnknownBundle(f"{bundle} is not a current bundle")
        bundle.range.split()  # raises InvalidBundle before anything changes
        record = self.record(bundle)
        effects: list[ControllerEffect] = []
        if record.state is BundleState.UNASSIGNED:
            self._split(bundle, now_ms, effects)
            self._assign_unassigned(now_ms, effects)
        elif record.state is BundleState.OWNED:
            self._release(bundle, now_ms, effects, split=True)
        else:
            raise BundleBusy(f"{bundle} is {record.state.value}")
        return effects

    def tick(self, now_ms: int) -> list[ControllerEffect]:
        """Resend overdue commands, assign what is unassigned, shed load, rebalance."""
        self._check_alive()
        effects: list[ControllerEffect] = []
        for bundle in sorted(self._last_sent_ms):
            if now_ms - self._last_sent_ms[bundle] >= self.policy.command_retry_ms:
                self._send(bundle, now_ms, effects)
        self._assign_unassigned(now_ms, effects)
        self._shed(now_ms, effects)
        self._rebalance(now_ms, effects)
        return effects

    # --- internals -----------------------------------------------------------------------

    def _known(self, bundle: BundleId) -> bool:
        ns = self._namespaces.get(bundle.namespace)
        return ns is not None and ns.contains(bundle)

    def _put(self, bundle: BundleId, record: BundleRecord, effects: list[ControllerEffect]) -> None:
        self._records[bundle] = record
        effects.append(WriteBundleState(bundle, record, self.epoch))

    def _send(self, bundle: BundleId, now_ms: int, effects: list[ControllerEffect]) -> None:
        record = self._records[bundle]
        assert record.broker is not None
        if record.state is BundleState.ASSIGNING:
            effects.append(AssignBundle(bundle, record.broker, self.epoch))
        elif record.state is BundleState.RELEASING:
            effects.append(ReleaseBundle(bundle, record.broker, self.epoch))
        else:
            self._last_sent_ms.pop(bundle, None)
            return
        self._last_sent_ms[bundle] = now_ms

    def _unassign(self, bundle: BundleId, now_ms: int, effects: list[ControllerEffect]) -> None:
        record = self.record(bundle)
        self._last_sent_ms.pop(bundle, None)
        self._put(bundle, record.moved(BundleState.UNASSIGNED, None, self.epoch, now_ms), effects)
        if record.split_after_release:
            self._split(bundle, now_ms, effects)

    def _release(
        self, bundle: BundleId, now_ms: int, effects: list[ControllerEffect], split: bool = False
    ) -> None:
        record = self._records[bundle]
        releasing = record.moved(BundleState.RELEASING, record.broker, self.epoch, now_ms)
        releasing = replace(releasing, avoid_broker=record.broker, split_after_release=split)
        self._put(bundle, releasing, effects)
        self._send(bundle, now_ms, effects)

    def _split(self, bundle: BundleId, now_ms: int, effects: list[ControllerEffect]) -> None:
        ns, halves = self._namespaces[bundle.namespace].split(bundle)
        record = self.record(bundle)
        self._namespaces[bundle.namespace] = ns
        self._records.pop(bundle, None)
        effects.append(WriteNamespaceBundles(ns, self.epoch))
        effects.append(DeleteBundleState(bundle, self.epoch))
        for half in halves:
            self._put(
                half,
                BundleRecord(BundleState.UNASSIGNED, None, self.epoch, now_ms, record.avoid_broker),
                effects,
            )

    def _candidates(self, namespace: str) -> frozenset[str]:
        live = frozenset(self._live)
        choose = self.policy.broker_candidates
        return live if choose is None else choose(namespace, live) & live

    def _bundle_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self._records.values():
            if record.broker is not None:
                counts[record.broker] = counts.get(record.broker, 0) + 1
        return counts

    def _namespace_counts(self) -> dict[str, dict[str, int]]:
        """Bundles held or being handed to each broker, per namespace."""
        counts: dict[str, dict[str, int]] = {}
        for bundle, record in self._records.items():
            if record.broker is not None:
                per_broker = counts.setdefault(bundle.namespace, {})
                per_broker[record.broker] = per_broker.get(record.broker, 0) + 1
        return counts

    def _assign_unassigned(self, now_ms: int, effects: list[ControllerEffect]) -> None:
        if not self._live:
            return
        counts = self._bundle_counts()
        namespace_counts = self._namespace_counts()
        for ns in self.namespaces:
            in_namespace = namespace_counts.setdefault(ns.namespace, {})
            for bundle in ns.bundles:
                record = self.record(bundle)
                if record.state is not BundleState.UNASSIGNED:
                    continue
                allowed = self._candidates(bundle.namespace)
                if not allowed:
                    continue  # isolation: no broker that may own it lives
                candidates = allowed - {record.avoid_broker} or allowed
                moved = record.avoid_broker is not None
                broker = rank_brokers(
                    candidates,
                    counts,
                    self._reports,
                    self.policy.load,
                    None if moved else in_namespace,
                )[0]
                counts[broker] = counts.get(broker, 0) + 1
                in_namespace[broker] = in_namespace.get(broker, 0) + 1
                assigning = replace(
                    record.moved(BundleState.ASSIGNING, broker, self.epoch, now_ms),
                    avoid_broker=None,
                )
                self._put(bundle, assigning, effects)
                self._send(bundle, now_ms, effects)

    def _shed(self, now_ms: int, effects: list[ControllerEffect]) -> None:
        load = self.policy.load
        if not any(not load.overloaded(self._reports.get(b)) for b in self._live):
            return  # nowhere to move anything
        moves = 0
        for broker in sorted(self._live):
            if moves >= load.shed_moves_per_tick_max:
                return
            report = self._reports.get(broker)
            if report is None or not load.overloaded(report):
                continue
            if report.reported_ms <= self._last_shed_ms.get(broker, -1):
                continue  # wait for a report that shows the effect of the last move
            owned = [
                b
                for b, r in self._records.items()
                if r.broker == broker
                and r.state is BundleState.OWNED
                and self._candidates(b.namespace) - {broker}  # somewhere else to go
            ]
            if not owned:
                continue
            busiest = max(sorted(owned), key=lambda b: report.bundle_msg_rates.get(b.name, 0.0))
            self._release(busiest, now_ms, effects)
            self._last_shed_ms[broker] = report.reported_ms
            moves += 1

    def _rebalance(self, now_ms: int, effects: list[ControllerEffect]) -> None:
        load = self.policy.load
        spread_max = load.rebalance_count_spread_max
        if spread_max is None or len(self._live) < 2:
            return
        if any(r.state in _IN_TRANSITION for r in self._records.values()):
            return  # one move at a time: wait for the last one (or a shed) to land
        counts = self._bundle_counts()
        targets = [b for b in self._live if not load.overloaded(self._reports.get(b))]
        if not targets:
            return
        fewest = min(counts.get(b, 0) for b in targets)
        most = max(sorted(self._live), key=lambda b: counts.get(b, 0))
        if counts.get(most, 0) - fewest <= spread_max:
            return
        emptier = {b for b in targets if counts.get(b, 0) + spread_max < counts.get(most, 0)}
        owned = sorted(
            b
            for b, r in self._records.items()
            if r.broker == most
            and r.state is BundleState.OWNED
            and now_ms - r.since_ms >= load.rebalance_owned_min_ms
            and self._candidates(b.namespace) & emptier  # isolation lets it go there
        )
        if not owned:
            return
        report = self._reports.get(most)
        rates = report.bundle_msg_rates if report is not None else {}
        per_namespace: dict[str, int] = {}
        for bundle in owned:
            per_namespace[bundle.namespace] = per_namespace.get(bundle.namespace, 0) + 1

        def key(bundle: BundleId) -> tuple[float, int, BundleId]:
            # the busiest (the move is to take load off it), then one of the namespace it
            # holds most of (so a namespace spreads over brokers), then by name
            return (-rates.get(bundle.name, 0.0), -per_namespace[bundle.namespace], bundle)

        self._release(min(owned, key=key), now_ms, effects)


_IN_TRANSITION = (BundleState.ASSIGNING, BundleState.RELEASING)
