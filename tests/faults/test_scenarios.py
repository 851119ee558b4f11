"""The scenarios of issue 38 on one cluster of real processes with a fault proxy on every
link (:mod:`tests.faults.fault_cluster`): the controller partitioned from the other brokers
and ZooKeeper; a bookie partitioned from the brokers but not from ZooKeeper; a bookie cut
from ZooKeeper only (for less than its session or past it: it must register again, writable,
soon after the heal); one bookie's
disk full while the others have room; a slow bookie (its link delayed: the proxy models the
slow disk, nothing test-only runs in the bookie); asymmetric partitions (one direction of a
bookie's or the owner's ZooKeeper link); two faults at once (the owner cut from ZooKeeper
past its session and a bookie cut from the brokers); the clients' links to the owner cut or
reset while producing with deduplication on.

Each scenario writes its own topic through :func:`tests.faults.fault_rounds.run_rounds`,
which checks the history (every acknowledged message exactly once and in order, no
redelivery at or before a durable mark-delete, never two writers in the stored ledgers) and
that the service is back soon after each heal. Seeded (the seed is printed;
``MAGNETAR_TEST_SEED`` replays one). One fault per scenario by default;
``MAGNETAR_LONG_TESTS=1`` injects 20 each (``tests/faults/long_run.py`` runs thousands).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from magnetar.metadata.zookeeper_server import ZooKeeperServer
from tests.faults.fault_cluster import SCENARIOS, FaultCluster
from tests.faults.fault_rounds import BACK_WITHIN_S, run_rounds

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
ROUNDS = 20 if LONG else 1

pytestmark = pytest.mark.timeout(1800 if LONG else 150)


@pytest.fixture(scope="module")
def cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultCluster]:
    root = tmp_path_factory.mktemp("fault-cluster")
    c = FaultCluster(zookeeper, root, f"/fault-scenarios-{random.randrange(2**32)}")
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_loses_duplicates_and_regresses_nothing(
    cluster: FaultCluster, scenario: str
) -> None:
    seed = int(os.environ.get("MAGNETAR_TEST_SEED") or random.randrange(2**32))
    print(f"seed {seed} (replay: MAGNETAR_TEST_SEED={seed})")
    cluster.supervise()
    figures = run_rounds(cluster, f"persistent://public/faults/{scenario}-{seed}", [scenario],
                         ROUNDS, seed)  # fmt: skip
    print(figures.line())
    assert figures.problems == []
    assert max(figures.recovery_s) < BACK_WITHIN_S, figures.recovery_s
