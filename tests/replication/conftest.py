"""Two ``magnetar standalone`` processes, clusters ``east`` and ``west``, each with its own
metadata store, registered with each other (``admin clusters create``) as Pulsar's
geo-replication recipe does; shared by the session (tests use unique names) and killed at
teardown even when a test fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from magnetar.testing import StandaloneProcess

HTTP_TIMEOUT_S = 15


@dataclass
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(base: str, method: str, path: str, body: Any = None) -> Answer:
    """One admin REST call; never raises on an HTTP error status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return Answer(resp.status, resp.read())
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.read())


def ok(base: str, method: str, path: str, body: Any = None) -> Any:
    """Call and require 2xx; the JSON answer (None for 204)."""
    answer = call(base, method, path, body)
    assert 200 <= answer.status < 300, (method, path, answer.status, answer.body)
    return answer.json() if answer.status == 200 and answer.body else None


def admin(node: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``magnetar admin --admin-url <node> ARGS`` as a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )


def register(node: StandaloneProcess, name: str, other: StandaloneProcess) -> None:
    """Register ``other`` as cluster ``name`` in ``node``'s metadata store (or update it)."""
    body = {"serviceUrl": other.http_url, "brokerServiceUrl": other.url}
    if call(node.http_url, "PUT", f"/admin/v2/clusters/{name}", body).status == 409:
        ok(node.http_url, "POST", f"/admin/v2/clusters/{name}", body)


@dataclass
class Pair:
    east: StandaloneProcess
    west: StandaloneProcess

    def replicated_namespace(self, *, deduplication: bool = True) -> str:
        """A new tenant/namespace on both clusters, replicated to both."""
        ns = f"t{uuid.uuid4().hex[:8]}/geo"
        tenant = ns.split("/")[0]
        for node in (self.east, self.west):
            ok(node.http_url, "PUT", f"/admin/v2/tenants/{tenant}", {
                "adminRoles": [], "allowedClusters": ["east", "west"]
            })  # fmt: skip
            ok(node.http_url, "PUT", f"/admin/v2/namespaces/{ns}")
            if deduplication:
                ok(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
            ok(node.http_url, "POST", f"/admin/v2/namespaces/{ns}/replication", ["east", "west"])
        return ns


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    base = tmp_path_factory.mktemp("geo")
    with (
        StandaloneProcess(base / "east", "--cluster-name", "east", "--no-functions-worker") as east,
        StandaloneProcess(base / "west", "--cluster-name", "west", "--no-functions-worker") as west,
    ):
        register(east, "west", west)
        register(west, "east", east)
        yield Pair(east, west)
