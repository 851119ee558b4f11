"""Broker load reports and the choice of a broker for a bundle.

The choice ranks live brokers by, in order: not overloaded (last reported CPU below
``overload_cpu_percent``); when given, fewest bundles of the bundle's own namespace (as
Pulsar's placement spreads a namespace over its brokers first); fewest bundles held or being
handed to it, as the controller's own table counts them (exact at once, while reports lag a
reporting interval); lowest reported message rate (in + out); broker id. So a burst of
assignments spreads over the brokers, a new namespace's bundles spread even when one broker
holds far fewer bundles than the rest, a new broker takes new bundles first, and reports
decide between equals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a broker reports about itself (periodically, through the metadata store)."""

    broker: str
    reported_ms: int
    """The broker's timestamp of the report; a later report supersedes an earlier one."""
    cpu_percent: float = 0.0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    topics: int = 0
    connections: int = 0
    bundle_msg_rates: Mapping[str, float] = field(default_factory=dict)
    """Message rate (in + out) per owned bundle name, for choosing what to shed."""

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out


DEFAULT_OVERLOAD_CPU_PERCENT = 85.0
"""Pulsar's ``loadBalancerBrokerOverloadedThresholdPercentage`` default."""


@dataclass(frozen=True, slots=True)
class LoadPolicy:
    overload_cpu_percent: float = DEFAULT_OVERLOAD_CPU_PERCENT
    """A broker reporting at least this CPU is overloaded: it takes no new bundles while
    another broker is not, and sheds bundles."""
    shed_moves_per_tick_max: int = 1
    """Bound on bundles unloaded for load shedding per tick, over all brokers."""
    rebalance_count_spread_max: int | None = 1
    """Count rebalancing: while the live broker holding the most bundles holds more than
    this many more than the (not overloaded) one holding the fewest, and no bundle is in
    transition, its busiest OWNED bundle is unloaded per tick (it goes to the broker with
    fewest). So a broker that joins a running cluster takes bundles without any data being
    copied. ``None`` turns it off."""
    rebalance_owned_min_ms: int = 10_000
    """Count rebalancing moves only bundles OWNED for at least this long, so a bundle just
    placed (by an unload, a failover or an earlier move) is not moved straight on."""

    def overloaded(self, report: LoadReport | None) -> bool:
        return report is not None and report.cpu_percent >= self.overload_cpu_percent


def rank_brokers(
    brokers: Iterable[str],
    bundle_counts: Mapping[str, int],
    reports: Mapping[str, LoadReport],
    policy: LoadPolicy,
    namespace_counts: Mapping[str, int] | None = None,
) -> list[str]:
    """``brokers`` best first for the next bundle (see the module docstring);
    ``namespace_counts`` are the bundles of that bundle's namespace per broker."""
    in_namespace = namespace_counts or {}

    def key(broker: str) -> tuple[bool, int, int, float, str]:
        report = reports.get(broker)
        return (
            policy.overloaded(report),
            in_namespace.get(broker, 0),
            bundle_counts.get(broker, 0),
            report.msg_rate if report is not None else 0.0,
            broker,
        )

    return sorted(brokers, key=key)
