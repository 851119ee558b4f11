"""The admin REST API of ``magnetar standalone`` run as a real process, called over HTTP
with ``urllib`` (stdlib), plus the official ``pulsar`` wheel to make traffic.

``standalone`` is shared by the session (tests use unique tenant/namespace/topic names);
it is killed at teardown even when a test fails.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest

from magnetar.testing import StandaloneProcess

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)

HTTP_TIMEOUT_S = 15


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        reason = self.json()["reason"]
        assert isinstance(reason, str)
        return reason


class Http:
    """Blocking calls to one base URL; never raises on an HTTP error status."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> Answer:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                return Answer(resp.status, dict(resp.headers.items()), resp.read())
        except urllib.error.HTTPError as err:
            return Answer(err.code, dict(err.headers.items()), err.read())

    def get(self, path: str) -> Answer:
        return self.call("GET", path)

    def put(self, path: str, body: Any = None, **kw: Any) -> Answer:
        return self.call("PUT", path, body, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Answer:
        return self.call("POST", path, body, **kw)

    def delete(self, path: str) -> Answer:
        return self.call("DELETE", path)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        """Call and require 2xx; the JSON answer (None for 204)."""
        answer = self.call(method, path, body)
        assert 200 <= answer.status < 300, (method, path, answer.status, answer.body)
        return answer.json() if answer.status == 200 and answer.body else None


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(
        tmp_path_factory.mktemp("admin") / "data", "--failover-delay-ms", "100"
    ) as node:
        yield node


@pytest.fixture
def http(standalone: StandaloneProcess) -> Http:
    return Http(standalone.http_url)


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=15, logger=_client_log)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def name() -> str:
    """A unique short name for tenants, namespaces, topics."""
    return f"t{uuid.uuid4().hex[:10]}"
