"""A real cluster: ZooKeeper, ``magnetar bookie`` and ``magnetar broker`` processes, and
the official ``pulsar`` client through a service URL naming one broker.

* The broker owning a topic is SIGKILLed (or SIGTERMed) mid-stream: the clients find the new owner by
  themselves, every acknowledged message is consumed, in the producer's order.
* The controller is SIGKILLed: another broker becomes controller at a higher epoch and
  moves the dead broker's bundles to the live one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.controller import NamespaceBundles
from magnetar.testing import wait_until
from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess

SESSION_TIMEOUT_S = "2"
MESSAGES = 200
KILL_AFTER = 105
WINDOW = 20

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster_procs() -> Iterator[list[BookieProcess | BrokerProcess]]:
    started: list[BookieProcess | BrokerProcess] = []
    yield started
    for p in reversed(started):
        p.kill()


def start_bookies(
    procs: list[BookieProcess | BrokerProcess], url: str, base: Path, n: int
) -> list[BookieProcess]:
    bookies = [BookieProcess(url, base / f"bookie{i}") for i in range(n)]
    for b in bookies:
        b.start()
        procs.append(b)
    for b in bookies:
        wait_until(lambda b=b: " ready" in b.log(), timeout_s=30, what=f"bookie {b.bookie_id}")
    return bookies


def start_brokers(
    procs: list[BookieProcess | BrokerProcess], url: str, base: Path, n: int, *extra: str
) -> list[BrokerProcess]:
    brokers = []
    for i in range(n):
        broker = BrokerProcess(
            url,
            base / f"broker{i}.log",
            "--session-timeout-s", SESSION_TIMEOUT_S,
            "--ensemble-size", "3", "--write-quorum", "2", "--ack-quorum", "2",
            *extra,
        )  # fmt: skip
        procs.append(broker)
        broker.start()
        brokers.append(broker)
    return brokers


def http_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as response:  # follows 307 to the owner
        body = json.load(response)
    assert isinstance(body, dict)
    return body


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def owner_of(entry: BrokerProcess, topic: str, brokers: list[BrokerProcess]) -> BrokerProcess:
    """The broker serving ``topic``, by an HTTP lookup on ``entry``: its own answer, or
    the broker its 307 redirects to (not followed: that broker may be stopped)."""
    local = topic.removeprefix("persistent://")
    url = f"{entry.http_url}/lookup/v2/topic/persistent/{local}"
    try:
        with urllib.request.build_opener(_NoRedirect).open(url, timeout=30) as response:
            answer = json.load(response)
        owners = [b for b in brokers if b.url == answer["brokerUrl"]]
    except urllib.error.HTTPError as exc:
        if exc.code != 307:
            raise
        location = exc.headers["Location"]
        owners = [b for b in brokers if location.startswith(b.http_url + "/")]
    assert len(owners) == 1, (url, [b.url for b in brokers])
    return owners[0]


def controller(entry: BrokerProcess) -> tuple[str, int] | None:
    """(broker id, epoch) of the controller, ``None`` while none is elected (503)."""
    try:
        answer = http_json(f"{entry.http_url}/admin/v2/brokers/leaderBroker")
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return None
        raise
    epoch = answer["controllerEpoch"]
    assert isinstance(epoch, int)
    return str(answer["brokerId"]), epoch


@pytest.mark.parametrize(
    ("stop_signal", "deduplication"),
    [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGKILL, True)],
    ids=["kill", "term", "kill-dedup"],
)
def test_clients_follow_a_stopped_owner_to_the_new_one(
    zookeeper_url: str,
    tmp_path: Path,
    cluster_procs: list[BookieProcess | BrokerProcess],
    stop_signal: signal.Signals,
    deduplication: bool,
) -> None:
    """SIGKILL: the owner's session expires, the controller reassigns its bundles and the
    new owner recovers (fences) the topic's ledger. SIGTERM: the owner closes its topics'
    producers and consumers (CLOSE_PRODUCER / CLOSE_CONSUMER) and gives up its bundles
    before it exits. Sends are pipelined (windows of 20), so some are in flight when the
    owner stops and the client re-sends them to the new owner: duplicates may appear, but
    none with deduplication on."""
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    extra = ("--deduplication",) if deduplication else ()
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 3, *extra)
    entry = brokers[0]
    # The first broker took the bundles of the namespaces that existed when it started;
    # a namespace created now has its bundles spread over the less loaded brokers, so the
    # entry broker redirects.
    request = urllib.request.Request(
        f"{entry.http_url}/admin/v2/namespaces/public/failover", data=b"", method="PUT"
    )
    urllib.request.urlopen(request, timeout=30).close()
    topic, victim = next(
        (t, o)
        for t in (f"persistent://public/failover/t-{i}" for i in range(64))
        if (o := owner_of(entry, t, brokers)) is not entry
    )
    client = pulsar.Client(entry.url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        # Admin requests about the topic on the entry broker are redirected to the owner.
        local = topic.removeprefix("persistent://")
        stats = http_json(f"{entry.http_url}/admin/v2/persistent/{local}/stats")
        assert len(stats["publishers"]) == 1  # type: ignore[arg-type]
        outcomes: dict[int, pulsar.Result] = {}

        def sent(i: int) -> Callable[[pulsar.Result, object], None]:
            def callback(result: pulsar.Result, _msg_id: object) -> None:
                outcomes[i] = result

            return callback

        for first in range(0, MESSAGES, WINDOW):
            for i in range(first, first + WINDOW):
                producer.send_async(b"%d" % i, sent(i))
                if i == KILL_AFTER:
                    victim.signal(stop_signal)
            producer.flush()
        wait_until(lambda: len(outcomes) == MESSAGES, timeout_s=60, what="every send answered")
        acked = sorted(i for i, result in outcomes.items() if result == pulsar.Result.Ok)
        assert acked[-1] == MESSAGES - 1, "sends after the failover were never acknowledged"

        received: list[int] = []
        while not set(acked) <= set(received):
            message = consumer.receive(timeout_millis=30_000)
            received.append(int(message.data()))
            consumer.acknowledge(message)
        firsts = list(dict.fromkeys(received))
        assert firsts == sorted(firsts), "the producer's order was not kept"
        if deduplication:
            assert len(received) == len(firsts), "a message was delivered twice"
    finally:
        client.close()
    new_owner = owner_of(entry, topic, brokers)
    assert new_owner is not victim
    if stop_signal is signal.SIGTERM:
        assert victim.proc is not None and victim.proc.wait(30) == 0


def test_a_killed_controller_is_replaced_at_a_higher_epoch(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    controller_id, epoch = wait_until(
        lambda: controller(brokers[0]), timeout_s=30, what="a controller"
    )
    (dead,) = [b for b in brokers if b.broker_id == controller_id]
    (survivor,) = [b for b in brokers if b is not dead]
    dead.signal(signal.SIGKILL)

    def new_controller() -> tuple[str, int] | None:
        got = controller(survivor)
        return got if got is not None and got[0] == survivor.broker_id else None

    _, new_epoch = wait_until(new_controller, timeout_s=30, what="a new controller")
    assert new_epoch > epoch
    # The new controller moved every bundle of public/default to the live broker.
    bundles = NamespaceBundles.default("public/default")
    topics = {}
    for i in range(256):
        name = f"persistent://public/default/t{i}"
        topics.setdefault(bundles.bundle_for_topic(name), name)
    assert len(topics) == len(bundles.bundles)
    for name in topics.values():
        assert owner_of(survivor, name, brokers) is survivor

    def metrics_show_it() -> bool:
        with urllib.request.urlopen(f"{survivor.http_url}/metrics", timeout=30) as response:
            metrics = response.read().decode()
        return all(
            line in metrics.splitlines()
            for line in (
                "magnetar_controller_is_leader 1.0",
                f"magnetar_controller_epoch {float(new_epoch)}",
                # public/default and public/functions, acknowledged to the controller
                'magnetar_controller_bundles{state="Owned"} 8.0',
                "magnetar_bundles_owned 8.0",
            )
        )

    wait_until(metrics_show_it, timeout_s=30, what="the controller's metrics")

    # The same through the command line.
    def admin(*args: str) -> str:
        return run_admin(survivor.http_url, *args)

    leader = json.loads(admin("--output", "json", "brokers", "leader-broker"))
    assert (leader["brokerId"], leader["controllerEpoch"]) == (survivor.broker_id, new_epoch)
    assert admin("brokers", "list").split() == [survivor.broker_id]
    assert admin("topics", "lookup", "t0").strip() == survivor.url


def test_a_broker_stalled_past_its_session_serves_nothing_after_resuming(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    """The owner is SIGSTOPped past its session timeout; the controller gives its bundles
    to the other broker, which opens the topic (fencing the stalled owner's ledger). Once
    resumed, the stalled broker's appends fail, it exits with status 1 on its lost
    session, and its clients end up on the new owner with every acknowledged message."""
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    entry = brokers[0]
    request = urllib.request.Request(
        f"{entry.http_url}/admin/v2/namespaces/public/stall", data=b"", method="PUT"
    )
    urllib.request.urlopen(request, timeout=30).close()
    topic, stalled = next(
        (t, o)
        for t in (f"persistent://public/stall/t-{i}" for i in range(64))
        if (o := owner_of(entry, t, brokers)) is not entry
    )
    client = pulsar.Client(entry.url, operation_timeout_seconds=30)
    other = pulsar.Client(entry.url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        acked: list[int] = []
        for i in range(50):
            producer.send(b"%d" % i)
            acked.append(i)
        stalled.signal(signal.SIGSTOP)
        outcomes: dict[int, pulsar.Result] = {}

        def sent(i: int) -> Callable[[pulsar.Result, object], None]:
            def callback(result: pulsar.Result, _msg_id: object) -> None:
                outcomes[i] = result

            return callback

        for i in range(50, 100):  # they wait in the stalled broker's socket
            producer.send_async(b"%d" % i, sent(i))
        wait_until(
            lambda: owner_of(entry, topic, brokers) is entry,
            timeout_s=60,
            what="the bundle moved to the live broker",
        )
        other.create_producer(topic).close()  # the new owner opens (and fences) the topic
        stalled.signal(signal.SIGCONT)
        assert stalled.proc is not None and stalled.proc.wait(60) == 1
        producer.send(b"100")
        producer.flush()
        acked += [i for i in range(50, 100) if outcomes.get(i) == pulsar.Result.Ok] + [100]

        received: list[int] = []
        while not set(acked) <= set(received):
            message = consumer.receive(timeout_millis=30_000)
            received.append(int(message.data()))
            consumer.acknowledge(message)
        firsts = list(dict.fromkeys(received))
        assert firsts == sorted(firsts), "the producer's order was not kept"
    finally:
        other.close()
        client.close()


def test_a_partitioned_topic_spread_over_brokers(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    """Created through one broker while other brokers own some of its partitions (this
    failed with 503), then produced and consumed through another broker."""
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    base = "persistent://public/spread/parts"
    # The first broker holds public/default and public/functions (8 bundles): two more
    # namespaces even the counts, so the bundles of "spread" go to both brokers.
    for path, body in (
        ("namespaces/public/fill-1", b""),
        ("namespaces/public/fill-2", b""),
        ("namespaces/public/spread", b""),
        ("persistent/public/spread/parts/partitions", b"8"),
    ):
        request = urllib.request.Request(
            f"{brokers[0].http_url}/admin/v2/{path}",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=30).close()
    owners = {owner_of(brokers[0], f"{base}-partition-{i}", brokers).broker_id for i in range(8)}
    assert owners == {b.broker_id for b in brokers}, "the partitions are not spread"
    client = pulsar.Client(brokers[1].url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(base, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(base, batching_enabled=False)
        for i in range(64):
            producer.send(b"%d" % i, partition_key=str(i))
        received = set()
        while len(received) < 64:
            message = consumer.receive(timeout_millis=30_000)
            received.add(int(message.data()))
            consumer.acknowledge(message)
        assert received == set(range(64))
    finally:
        client.close()


def run_admin(http_url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_unloaded_bundle_moves_and_its_clients_follow(
    zookeeper_url: str, tmp_path: Path, cluster_procs: list[BookieProcess | BrokerProcess]
) -> None:
    """``admin namespaces unload -b`` asked of a broker that is not the controller (307 to
    it): the controller releases the bundle (its owner closes the topic's producers and
    consumers), assigns it to the other broker, and the clients follow with every
    acknowledged message, in order."""
    start_bookies(cluster_procs, zookeeper_url, tmp_path, 3)
    brokers = start_brokers(cluster_procs, zookeeper_url, tmp_path, 2)
    entry = brokers[0]
    run_admin(entry.http_url, "namespaces", "create", "public/moving")
    topic, owner = next(
        (t, o)
        for t in (f"persistent://public/moving/t-{i}" for i in range(64))
        if (o := owner_of(entry, t, brokers)) is not entry
    )
    controller_id = wait_until(lambda: controller(entry), timeout_s=30, what="a controller")[0]
    assert controller_id != owner.broker_id  # so the unload asked of the owner is redirected
    shown = json.loads(
        run_admin(owner.http_url, "--output", "json", "namespaces", "bundles", "public/moving")
    )
    assert shown == {
        "boundaries": NamespaceBundles.default("public/moving").to_names(),
        "numBundles": 4,
    }
    bundle = NamespaceBundles.default("public/moving").bundle_for_topic(topic)
    client = pulsar.Client(entry.url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(b"%d" % i)
        run_admin(owner.http_url, "namespaces", "unload", "public/moving", "-b", bundle.range.name)
        wait_until(
            lambda: owner_of(entry, topic, brokers) is entry, timeout_s=30, what="the bundle moved"
        )
        for i in range(50, 100):
            producer.send(b"%d" % i)
        received: list[int] = []
        while not set(range(100)) <= set(received):
            message = consumer.receive(timeout_millis=30_000)
            received.append(int(message.data()))
            consumer.acknowledge(message)
        firsts = list(dict.fromkeys(received))
        assert firsts == sorted(firsts)
    finally:
        client.close()
    assert f"released bundle {bundle}" in owner.log_tail(200)
