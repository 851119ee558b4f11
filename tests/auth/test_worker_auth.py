"""``magnetar functions-worker`` (``python -m magnetar.functions``) as its own process
against a ``magnetar standalone`` with token authentication and authorization on:

* the worker joins with its broker-client credentials (``--broker-client-auth-*``);
* its own REST API checks callers with the same options as the brokers: no or wrong
  credentials get 401; functions of a namespace need a super user, the tenant's admin or the
  ``functions`` grant, read from the brokers at each request (a revocation counts at once);
  the worker cluster's routes need a super user.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import ELECTION_TIMEOUT_S, WorkerProcess

from .conftest import SUPER_USER, Secrets, http

pytestmark = pytest.mark.timeout(180)

NS = "public/default"
DEV = "fn-dev"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[StandaloneProcess]:
    data_dir = tmp_path_factory.mktemp("auth-worker") / "data"
    with StandaloneProcess(data_dir, *secrets.args("--no-functions-worker")) as started:
        yield started


@pytest.fixture(scope="module")
def worker(
    node: StandaloneProcess, secrets: Secrets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    log_dir: Path = tmp_path_factory.mktemp("auth-worker-logs")
    proc = WorkerProcess(
        node, log_dir, "secure-w1",
        *secrets.args(),
        "--broker-client-auth-plugin", "token",
        "--broker-client-auth-params", f"token:{secrets.token(SUPER_USER)}",
    )  # fmt: skip
    try:
        wait_until(
            lambda: proc.joined() or proc.proc.poll() is not None,
            ELECTION_TIMEOUT_S,
            what="the worker joined",
        )
        assert proc.joined(), (log_dir / "secure-w1.log").read_text()[-2000:]
        yield proc
    finally:
        proc.proc.kill()
        proc.proc.wait(10)


def _get(url: str, authorization: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(url, method="GET")
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw.strip() else None


def test_the_worker_joins_a_secured_broker_with_its_broker_client_credentials(
    worker: WorkerProcess, secrets: Secrets
) -> None:
    status, members = _get(
        f"{worker.http_url}/admin/v2/worker/cluster", f"Bearer {secrets.token(SUPER_USER)}"
    )
    assert status == 200 and [m["workerId"] for m in members] == ["secure-w1"]


def test_the_worker_rest_api_authenticates_and_authorizes(
    node: StandaloneProcess, worker: WorkerProcess, secrets: Secrets
) -> None:
    functions = f"{worker.http_url}/admin/v3/functions/{NS}"
    dev = f"Bearer {secrets.token(DEV)}"
    assert _get(f"{worker.http_url}/ready", None)[0] == 200  # open
    status, body = _get(functions, None)
    assert status == 401 and body["reason"].startswith("Authentication required"), body
    status, body = _get(functions, "Bearer not-a-real-token")
    assert status == 401 and "malformed token" in body["reason"], body
    status, body = _get(functions, dev)
    assert status == 403 and "functions on public/default" in body["reason"], body
    assert _get(f"{worker.http_url}/admin/v3/sources/{NS}", dev)[0] == 403

    grant = f"{node.http_url}/admin/v2/namespaces/{NS}/permissions/{DEV}"
    root = secrets.token(SUPER_USER)
    assert http("POST", grant, root, ["functions"])[0] == 204
    assert _get(functions, dev) == (200, [])
    assert _get(f"{worker.http_url}/admin/v3/sources/{NS}", dev)[0] == 403  # not granted
    status, body = _get(f"{worker.http_url}/admin/v2/worker/cluster", dev)
    assert status == 403 and "super user" in body["reason"], body

    assert http("DELETE", grant, root)[0] == 204
    assert _get(functions, dev)[0] == 403  # the next request after the revocation
    assert _get(functions, f"Bearer {root}") == (200, [])
    assert worker.proc.poll() is None and node.proc is not None and node.proc.poll() is None
