"""Prometheus metrics of a cluster broker (``magnetar broker``), collected at scrape time:

* ``magnetar_bundles_owned`` — bundles this broker holds (serves) now;
* ``magnetar_controller_is_leader`` — 1 while this broker is the controller, else 0;
* ``magnetar_controller_epoch`` — its controller epoch (only while it is the controller);
* ``magnetar_controller_bundles{state}`` — bundles per state of the bundle state machine
  (Unassigned, Assigning, Owned, Releasing; only while it is the controller);
* ``magnetar_controller_ledgers{state}`` — ledgers per replica state other than Healthy
  (UnderReplicated: a replica is missing and no copy runs; Rereplicating: a copy runs), and
  ``magnetar_controller_replication_tasks_in_flight`` — re-replication tasks running (both
  only while it is the controller; autorecovery).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class ClusterCollector(Collector):
    """Reads the broker's state through the callables (no I/O: they must not block)."""

    bundles_owned: Callable[[], int]
    controller_epoch: Callable[[], int | None]
    """The epoch while this broker is the controller, else ``None``."""
    bundle_states: Callable[[], Mapping[str, int]]
    """Bundles per state while this broker is the controller (empty otherwise)."""
    ledger_states: Callable[[], Mapping[str, int]] = dict
    """Ledgers per replica state but Healthy while this broker is the controller."""
    replication_tasks_in_flight: Callable[[], int | None] = lambda: None
    """Re-replication tasks in flight while this broker is the controller, else ``None``."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "magnetar_bundles_owned", "Bundles this broker holds", value=self.bundles_owned()
        )
        epoch = self.controller_epoch()
        yield GaugeMetricFamily(
            "magnetar_controller_is_leader",
            "1 while this broker is the controller",
            value=0 if epoch is None else 1,
        )
        if epoch is None:
            return
        yield GaugeMetricFamily("magnetar_controller_epoch", "The controller's epoch", value=epoch)
        states = GaugeMetricFamily(
            "magnetar_controller_bundles", "Bundles per state of the controller", labels=["state"]
        )
        for state, count in sorted(self.bundle_states().items()):
            states.add_metric([state], count)
        yield states
        ledgers = GaugeMetricFamily(
            "magnetar_controller_ledgers",
            "Ledgers per replica state (not Healthy) of the controller",
            labels=["state"],
        )
        for state, count in sorted(self.ledger_states().items()):
            ledgers.add_metric([state], count)
        yield ledgers
        tasks = self.replication_tasks_in_flight()
        if tasks is not None:
            yield GaugeMetricFamily(
                "magnetar_controller_replication_tasks_in_flight",
                "Re-replication tasks the controller has in flight",
                value=tasks,
            )
