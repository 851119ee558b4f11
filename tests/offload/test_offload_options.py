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
