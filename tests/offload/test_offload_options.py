"""The tiered-storage flags ``magnetar local-cluster`` passes on to every broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from magnetar.cli import offload_options

pytestmark = pytest.mark.timeout(120)


def test_the_forwarded_flags_give_a_broker_the_same_settings() -> None:
    values = {param: None for param in offload_options.PARAMS} | {
        "offload_driver": "aws-s3",
        "offload_bucket": "archive",
        "offload_endpoint": "http://127.0.0.1:9000",
        "offload_deletion_lag_ms": 0,
    }
    args = offload_options.forwarded_args(values)
    assert args == (
        "--offload-driver", "aws-s3", "--offload-bucket", "archive",
        "--offload-endpoint", "http://127.0.0.1:9000", "--offload-deletion-lag-ms", "0",
    )  # fmt: skip
    parsed: dict[str, object] = {}

    @click.command()
    @offload_options.offload_options
    def broker(**kwargs: object) -> None:
        parsed.update(kwargs)

    broker.main(list(args), standalone_mode=False)
    assert {k: v for k, v in parsed.items() if values[k] is not None} == {
        k: v for k, v in values.items() if v is not None
    }


def test_local_cluster_refuses_offload_flags_that_cannot_work(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--data-dir",
         str(tmp_path / "c"), "--offload-bucket", "archive"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--offload-bucket needs --offload-driver" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "c").exists()


def test_the_managed_ledger_flags_given_reach_the_brokers_with_the_same_values() -> None:
    """``local-cluster`` passes each managed-ledger flag given on, named as the broker names
    it; one not given is left to the broker's default."""
    from magnetar.cli.local_cluster_cmd import MANAGED_LEDGER_FLAGS, managed_ledger_args
    from magnetar.cli.server_setup import ledger_options, memory_options

    values = {
        "managed_ledger_max_entries_per_ledger": 30,
        "managed_ledger_min_ledger_rollover_time_ms": 0,
        "managed_ledger_cache_size_mb": None,
    }
    assert len(values) == len(MANAGED_LEDGER_FLAGS)
    args = managed_ledger_args(values)
    assert args == (
        "--managed-ledger-max-entries-per-ledger", "30",
        "--managed-ledger-min-ledger-rollover-time-ms", "0",
    )  # fmt: skip
    parsed: dict[str, object] = {}

    @click.command()
    @ledger_options
    @memory_options
    def broker(**kwargs: object) -> None:
        parsed.update(kwargs)

    broker.main(list(args), standalone_mode=False)
    assert {k: parsed[k] for k, v in values.items() if v is not None} == {
        k: v for k, v in values.items() if v is not None
    }
