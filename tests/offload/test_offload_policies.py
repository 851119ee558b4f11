"""Offload policies against a real ``magnetar standalone``: the namespace's
``offloadThreshold``, ``offloadThresholdInSeconds``, ``offloadDeletionLagMs`` and
``offloadPolicies`` and the topic's ``offloadPolicies`` over REST (round trips, Pulsar's
refusals, ``?applied=true``), and the same through ``magnetar admin`` as pulsar-admin spells
it; and a namespace policy driving automatic offload on a live topic. One standalone serves
the module (unique namespaces and topics per test), its ledgers rolling every few entries."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.admin_client import AdminClient, AdminHttpError
from magnetar.testing import StandaloneProcess, wait_until

RUN_TIMEOUT_S = 60.0
ENTRIES_PER_LEDGER = 5
OFFLOAD_WAIT_S = 30.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path_factory.mktemp("offload-policies") / "data",
        "--managed-ledger-max-entries-per-ledger", str(ENTRIES_PER_LEDGER),
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
    ) as node:  # fmt: skip
        yield node


@pytest.fixture
def admin(standalone: StandaloneProcess) -> AdminClient:
    return AdminClient(standalone.http_url, timeout_s=15)


@pytest.fixture
def namespace(admin: AdminClient) -> str:
    """``public/<unique>``: a namespace of the test's own."""
    name = f"public/off-{uuid.uuid4().hex[:8]}"
    admin.put(f"/admin/v2/namespaces/{name}")
    return name


def _refused(call: Any, *args: Any) -> AdminHttpError:
    with pytest.raises(AdminHttpError) as info:
        call(*args)
    return info.value


def test_namespace_single_values_round_trip(admin: AdminClient, namespace: str) -> None:
    ns = f"/admin/v2/namespaces/{namespace}"
    assert admin.get(f"{ns}/offloadThreshold") == -1
    assert admin.get(f"{ns}/offloadThresholdInSeconds") == -1
    assert admin.get(f"{ns}/offloadDeletionLagMs") is None  # 204: the broker's default

    admin.put(f"{ns}/offloadThreshold", 10 << 20)
    admin.put(f"{ns}/offloadThresholdInSeconds", 3600)
    admin.put(f"{ns}/offloadDeletionLagMs", 60_000)
    assert admin.get(f"{ns}/offloadThreshold") == 10 << 20
    assert admin.get(f"{ns}/offloadThresholdInSeconds") == 3600
    assert admin.get(f"{ns}/offloadDeletionLagMs") == 60_000
    stored = admin.get(ns)
    assert (stored["offload_threshold"], stored["offload_deletion_lag_ms"]) == (10 << 20, 60_000)

    admin.delete(f"{ns}/offloadDeletionLagMs")
    assert admin.get(f"{ns}/offloadDeletionLagMs") is None

    refused = _refused(admin.put, f"{ns}/offloadDeletionLagMs", -1)
    assert refused.status == 412 and "0 or more" in refused.reason
    assert _refused(admin.put, f"{ns}/offloadThreshold", "lots").status == 400
    missing = "/admin/v2/namespaces/public/no-such-namespace/offloadThreshold"
    assert _refused(admin.get, missing).status == 404


def test_namespace_offload_policies_round_trip_and_refusals(
    admin: AdminClient, namespace: str, tmp_path: Path
) -> None:
    ns = f"/admin/v2/namespaces/{namespace}"
    assert admin.get(f"{ns}/offloadPolicies") is None
    body = {
        "managedLedgerOffloadDriver": "aws-s3",
        "managedLedgerOffloadBucket": "archive",
        "managedLedgerOffloadRegion": "eu-west-1",
        "managedLedgerOffloadServiceEndpoint": "http://127.0.0.1:9",
        "managedLedgerOffloadThresholdInBytes": 1 << 20,
        "managedLedgerOffloadDeletionLagInMillis": 0,
        "managedLedgerOffloadedReadPriority": "BOOKKEEPER_FIRST",
    }
    admin.post(f"{ns}/offloadPolicies", body)
    got = admin.get(f"{ns}/offloadPolicies")
    assert {k: got[k] for k in body} == body
    assert got["s3ManagedLedgerOffloadBucket"] == "archive"  # Pulsar's S3 names too
    # the thresholds and lag it sets are the single values too, and the reverse
    assert admin.get(f"{ns}/offloadThreshold") == 1 << 20
    assert admin.get(f"{ns}/offloadDeletionLagMs") == 0
    admin.put(f"{ns}/offloadThreshold", 0)
    assert admin.get(f"{ns}/offloadPolicies")["managedLedgerOffloadThresholdInBytes"] == 0

    for invalid, reason in (
        ({"managedLedgerOffloadDriver": "azureblob"}, "not supported"),
        ({"managedLedgerOffloadDriver": "S3"}, "bucket must be specified"),
        ({"managedLedgerOffloadDriver": "filesystem"}, "needs fileSystemURI"),
        (
            {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "hdfs://nn/offload"},
            "fileSystemURI",
        ),
        (
            {
                "managedLedgerOffloadDriver": "filesystem",
                "managedLedgerOffloadDeletionLagInMillis": -1,
            },
            "0 or more",
        ),
    ):
        refused = _refused(admin.post, f"{ns}/offloadPolicies", invalid)
        assert refused.status == 412 and reason in refused.reason, invalid
    priority = {"managedLedgerOffloadDriver": "S3", "managedLedgerOffloadedReadPriority": "X"}
    assert _refused(admin.post, f"{ns}/offloadPolicies", priority).status == 400

    admin.delete(f"{ns}/removeOffloadPolicies")  # Pulsar's path
    assert admin.get(f"{ns}/offloadPolicies") is None
    fs = {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": f"file://{tmp_path}"}
    admin.post(f"{ns}/offloadPolicies", fs)
    assert admin.get(f"{ns}/offloadPolicies")["fileSystemURI"] == f"file://{tmp_path}"
    admin.delete(f"{ns}/offloadPolicies")
    assert admin.get(f"{ns}/offloadPolicies") is None


def test_topic_offload_policies_and_applied(
    admin: AdminClient, namespace: str, tmp_path: Path
) -> None:
    path = f"/admin/v2/persistent/{namespace}/t/offloadPolicies"
    admin.put(f"/admin/v2/persistent/{namespace}/t")
    assert admin.get(path) is None
    broker = admin.get(path, applied="true")  # the broker's flags (no driver here)
    assert "managedLedgerOffloadDriver" not in broker
    assert broker["managedLedgerOffloadDeletionLagInMillis"] == 4 * 3600 * 1000

    admin.post(
        f"/admin/v2/namespaces/{namespace}/offloadPolicies",
        {
            "managedLedgerOffloadDriver": "S3",
            "managedLedgerOffloadBucket": "ns",
            "managedLedgerOffloadRegion": "r",
            "managedLedgerOffloadThresholdInSeconds": 60,
        },
    )
    applied = admin.get(path, applied="true")
    assert applied["managedLedgerOffloadDriver"] == "S3"
    assert applied["managedLedgerOffloadThresholdInSeconds"] == 60

    own = {
        "managedLedgerOffloadDriver": "filesystem",
        "fileSystemURI": str(tmp_path),
        "managedLedgerOffloadThresholdInBytes": 0,
    }
    admin.post(path, own)
    assert admin.get(path) == own
    applied = admin.get(path, applied="true")
    assert applied["managedLedgerOffloadDriver"] == "filesystem"  # the topic's
    assert applied["managedLedgerOffloadThresholdInSeconds"] == 60  # the namespace's

    refused = _refused(admin.post, path, {"managedLedgerOffloadDriver": "nowhere"})
    assert refused.status == 412
    admin.delete(path)
    assert admin.get(path) is None
    assert _refused(admin.get, path.replace("/t/", "/missing/")).status == 404
    assert _refused(admin.get, path.replace("/t/", "/t-partition-0/")).status == 412


def _admin_cli(standalone: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "admin",
            "--admin-url",
            standalone.http_url,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def test_pulsar_admin_commands(
    standalone: StandaloneProcess, admin: AdminClient, namespace: str
) -> None:
    def run(*args: str) -> str:
        return _ok(_admin_cli(standalone, *args))

    def as_json(*args: str) -> Any:
        return json.loads(run("--output", "json", *args))

    ns = ("namespaces",)
    run(*ns, "set-offload-threshold", namespace, "--size", "10M", "--time", "1h")
    assert as_json(*ns, "get-offload-threshold", namespace) == {
        "offloadThresholdInBytes": 10 << 20,
        "offloadThresholdInSeconds": 3600,
    }
    run(*ns, "set-offload-deletion-lag", namespace, "--lag", "1h")
    assert run(*ns, "get-offload-deletion-lag", namespace).strip() == "60 minute(s)"
    run(*ns, "clear-offload-deletion-lag", namespace)
    assert admin.get(f"/admin/v2/namespaces/{namespace}/offloadDeletionLagMs") is None

    run(
        *ns, "set-offload-policies", namespace, "-d", "aws-s3", "-b", "archive",
        "-e", "http://127.0.0.1:9", "-r", "us-east-1", "-oat", "1M", "-oats", "2h",
        "-oae", "10s", "-orp", "bookkeeper-first",
    )  # fmt: skip
    policies = as_json(*ns, "get-offload-policies", namespace)
    assert policies["managedLedgerOffloadDriver"] == "aws-s3"
    assert policies["managedLedgerOffloadBucket"] == "archive"
    assert policies["managedLedgerOffloadThresholdInBytes"] == 1 << 20
    assert policies["managedLedgerOffloadThresholdInSeconds"] == 7200
    assert policies["managedLedgerOffloadDeletionLagInMillis"] == 10_000
    assert policies["managedLedgerOffloadedReadPriority"] == "BOOKKEEPER_FIRST"
    run(*ns, "remove-offload-policies", namespace)
    assert admin.get(f"/admin/v2/namespaces/{namespace}/offloadPolicies") is None

    topic = f"persistent://{namespace}/cli"
    admin.put(f"/admin/v2/persistent/{namespace}/cli")
    run(
        "topics", "set-offload-policies", topic, "-d", "filesystem", "--directory", "/tmp/x",
        "-t", "0", "-dl", "0",
    )  # fmt: skip
    applied = as_json("topics", "get-offload-policies", topic, "--applied")
    assert applied["managedLedgerOffloadDriver"] == "filesystem"
    assert applied["fileSystemURI"] == "/tmp/x"
    assert applied["managedLedgerOffloadThresholdInBytes"] == 0
    assert applied["managedLedgerOffloadDeletionLagInMillis"] == 0
    run("topics", "remove-offload-policies", topic)
    assert run("topics", "get-offload-policies", topic).strip() == ""


def test_pulsar_admin_refusals_are_one_line(standalone: StandaloneProcess, namespace: str) -> None:
    for args, needle in (
        (("namespaces", "set-offload-policies", namespace, "-d", "azureblob", "-b", "b"), "not supported"),
        (("namespaces", "set-offload-deletion-lag", namespace, "--lag", "soon"), "invalid duration"),
    ):  # fmt: skip
        result = _admin_cli(standalone, *args)
        assert result.returncode != 0, args
        assert needle in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def _offloaded_ledgers(admin: AdminClient, topic: str) -> set[int]:
    stats = admin.get(f"/admin/v2/persistent/{topic}/internalStats")
    return {ledger["ledgerId"] for ledger in stats["ledgers"] if ledger.get("offloaded")}


def _closed_ledgers(admin: AdminClient, topic: str) -> set[int]:
    stats = admin.get(f"/admin/v2/persistent/{topic}/internalStats")
    return {ledger["ledgerId"] for ledger in stats["ledgers"][:-1]}


def _produce(standalone: StandaloneProcess, topic: str, count: int) -> None:
    client = pulsar.Client(standalone.url, operation_timeout_seconds=15)
    try:
        producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
        for i in range(count):
            producer.send(f"m-{i}".encode())
    finally:
        client.close()


def _more_closed_ledgers(admin: AdminClient, topic: str, than: set[int]) -> set[int]:
    """Wait until at least two ledgers outside ``than`` have closed; those ledgers."""
    return wait_until(
        lambda: found if len(found := _closed_ledgers(admin, topic) - than) >= 2 else None,
        OFFLOAD_WAIT_S,
        what="more closed ledgers",
    )


def test_a_namespace_policy_offloads_closed_ledgers_until_removed(
    standalone: StandaloneProcess, admin: AdminClient, namespace: str, tmp_path: Path
) -> None:
    """Threshold 0 and a filesystem driver: each ledger that closes is offloaded by itself.
    Ledgers that close while the policy is removed stay on the bookies: set again with
    another directory, it is there that they go."""
    first, second = tmp_path / "first", tmp_path / "second"
    topic = f"{namespace}/auto"
    policies = f"/admin/v2/namespaces/{namespace}/offloadPolicies"

    def offload_to(directory: Path) -> dict[str, Any]:
        return {
            "managedLedgerOffloadDriver": "filesystem",
            "fileSystemURI": f"file://{directory}",
            "managedLedgerOffloadThresholdInBytes": 0,
        }

    admin.put(f"/admin/v2/persistent/{topic}")
    # a subscription that reads nothing keeps the ledgers (no retention here)
    admin.put(f"/admin/v2/persistent/{topic}/subscription/keep")
    admin.post(policies, offload_to(first))
    _produce(standalone, topic, 3 * ENTRIES_PER_LEDGER)
    closed = _more_closed_ledgers(admin, topic, set())
    wait_until(
        lambda: closed <= _offloaded_ledgers(admin, topic),
        OFFLOAD_WAIT_S,
        what=f"ledgers {sorted(closed)} offloaded",
    )
    indexes = list(first.rglob("*-index"))
    assert len(indexes) >= len(closed), indexes

    _ok(_admin_cli(standalone, "namespaces", "remove-offload-policies", namespace))
    # ledgers closed by now may still be on their way to the first directory (an offload
    # starts when a ledger closes); the ones that close from here on must not go anywhere
    closed_under_first = _closed_ledgers(admin, topic)
    _produce(standalone, topic, 3 * ENTRIES_PER_LEDGER)
    later = _more_closed_ledgers(admin, topic, closed_under_first)
    assert not later & _offloaded_ledgers(admin, topic)

    admin.post(policies, offload_to(second))
    _produce(standalone, topic, 2 * ENTRIES_PER_LEDGER)  # a rollover under the new policy
    wait_until(
        lambda: later <= _offloaded_ledgers(admin, topic),
        OFFLOAD_WAIT_S,
        what=f"ledgers {sorted(later)} offloaded",
    )
    assert len(list(second.rglob("*-index"))) >= len(later)
    # none of them went to the first directory
    in_first = {path.name for path in first.rglob("*-index")}
    assert not {
        ledger for ledger in later if any(f"-ledger-{ledger}-index" in name for name in in_first)
    }
