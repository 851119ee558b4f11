"""``magnetar broker``'s expected errors: one line, a non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from magnetar.testing.broker import BrokerProcess

RUN_TIMEOUT_S = 60


def broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "broker", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def test_a_metadata_url_that_is_not_zookeeper_is_a_usage_error() -> None:
    done = broker("--metadata-url", "sqlite:///tmp/metadata.db")
    assert done.returncode == 2
    assert "is not a ZooKeeper URL" in done.stderr
    assert "Traceback" not in done.stderr


def test_quorums_out_of_order_are_a_usage_error(zookeeper_url: str) -> None:
    done = broker("--metadata-url", zookeeper_url, "--ensemble-size", "2", "--write-quorum", "3")
    assert done.returncode == 2
    assert "--ensemble-size >= --write-quorum >= --ack-quorum" in done.stderr


def test_an_id_held_by_a_live_broker_fails_the_start_in_one_line(
    zookeeper_url: str, tmp_path: Path
) -> None:
    first = BrokerProcess(zookeeper_url, tmp_path / "first.log", "--broker-id", "b1")
    try:
        first.start()
        done = broker(
            "--metadata-url", zookeeper_url, "--port", "0", "--http-port", "0",
            "--broker-id", "b1", "--session-timeout-s", "1",
        )  # fmt: skip
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert lines[-1] == (
            "Error: broker id b1 is registered by another live broker (/loadbalance/brokers/b1)"
        ), done.stderr
        assert "Traceback" not in done.stderr
        assert first.proc is not None and first.proc.poll() is None
    finally:
        first.kill()
