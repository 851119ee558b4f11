"""A real S3-compatible server (moto's, its own process) shared by the tiered-storage tests,
each test with a bucket of its own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from magnetar.offload.settings import OffloadDriverConfig
from magnetar.testing.s3_server import S3Server

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def s3_config(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> OffloadDriverConfig:
    """The S3 driver on a new bucket; credentials through the standard variables."""
    for name, value in S3Server.env().items():
        monkeypatch.setenv(name, value)
    bucket = f"offload-{next(_buckets)}"
    s3_server.create_bucket(bucket)
    return OffloadDriverConfig(
        "aws-s3", bucket=bucket, region="us-east-1", endpoint=s3_server.endpoint
    )


# the managed-ledger tests' in-process cluster of real bookies
from tests.managed_ledger.conftest import cluster  # noqa: E402, F401
