"""Names in admin URLs and hostile requests: every answer is 4xx JSON where the input is
at fault, never a 500, and no answer exposes an internal metadata path (issue 14 item 5).

The fuzz test is seeded and bounded; a failure prints the seed and the request, and
``MAGNETAR_REST_FUZZ_SEED`` replays one seed. It runs against a standalone of its own: its
requests create, change and delete whatever they happen to name, clusters included.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from magnetar.testing import StandaloneProcess

from .conftest import Answer, Http

PARAM = re.compile(r"{([^}]+)}")
FUZZ_REQUESTS = 600
FUZZ_SEEDS = (
    [int(os.environ["MAGNETAR_REST_FUZZ_SEED"])]
    if "MAGNETAR_REST_FUZZ_SEED" in os.environ
    else [1, 2]
)

HOSTILE_NAMES = [
    ".",
    "..",
    "%2e",
    "%2e%2e",
    "%2E%2E",
    "a%00b",
    "%00",
    "a%0Db",
    "a%0Ab",
    "%FF%FE",
    "x" * 5000,
    "%2F",
    "a%252Fb",
    "%20",
    "%C3%BC",  # ü
    "-=:._",
]
HOSTILE_NUMBERS = ["-1", "0", "1.5", "x", "9" * 40, "%00"]
HOSTILE_BODIES = [
    None,
    b"",
    b"{not json",
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b"\xff\xfe",
    b"1e999999",
    b"-1",
    b'"x"',
    b"null",
    b'{"retentionTimeInMinutes": "x", "retentionSizeInMB": []}',
    json.dumps({"k": "v" * 100_000}).encode(),
]
INTERNAL_PATH = re.compile(
    r"/(managed-ledgers|admin/policies|admin/partitioned-topics|ledgers|magnetar)/"
)


def _assert_sane(answer: Answer, what: str) -> None:
    assert answer.status < 500, (what, answer.status, answer.body[:300])
    if answer.status >= 400:
        reason = json.loads(answer.body)["reason"]
        assert isinstance(reason, str) and reason, what
        assert INTERNAL_PATH.search(reason) is None, (what, reason)


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/admin/v2/tenants/.", "'.' and '..' are reserved"),
        ("/admin/v2/tenants/%2e%2e", "'.' and '..' are reserved"),
        ("/admin/v2/namespaces/public/..", "'.' and '..' are reserved"),
        ("/admin/v2/persistent/public/default/..", "'.' and '..' are reserved"),
        ("/admin/v2/persistent/public/default/%2e", "'.' and '..' are reserved"),
        ("/admin/v2/persistent/public/default/a%00b", "control characters"),
        ("/admin/v2/persistent/public/default/a%0Db", "control characters"),
        ("/admin/v2/tenants/a%00b", "are not allowed"),
        ("/admin/v2/persistent/public/default/" + "x" * 5000, "longer than"),
        ("/admin/v2/tenants/" + "t" * 5000, "longer than"),
        ("/admin/v2/persistent/public/default/t/subscription/..", "reserved"),
        ("/admin/v2/persistent/public/default/t/subscription/a%0Db", "control characters"),
    ],
)
def test_invalid_names_in_urls_are_400(http: Http, path: str, fragment: str) -> None:
    for method in ("GET", "PUT", "DELETE"):
        answer = http.call(method, path)
        if answer.status == 405:  # no such operation on this path
            continue
        assert answer.status == 400, (method, path, answer.status, answer.body[:300])
        assert fragment in answer.reason, answer.reason
        _assert_sane(answer, f"{method} {path}")


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, b'{"adminRoles":' + b"[" * 5000 + b"]" * 5000 + b"}"],
)
def test_deeply_nested_json_is_400(http: Http, name: str, body: bytes) -> None:
    for method, path in (
        ("PUT", f"/admin/v2/tenants/{name}"),
        ("POST", "/admin/v2/namespaces/public/default/retention"),
    ):
        answer = http.call(method, path, raw=body)
        assert answer.status == 400, (method, path, answer.status, answer.body[:300])
        assert "nested deeper than" in answer.reason
    assert http.get(f"/admin/v2/tenants/{name}").status == 404  # nothing was created


def _operations(http: Http) -> list[tuple[str, str]]:
    doc = http.ok("GET", "/openapi.json")
    return sorted((method.upper(), path) for path, item in doc["paths"].items() for method in item)


def _value(rng: random.Random, param: str, good: dict[str, str]) -> str:
    if param in ("n", "count", "seconds", "timestamp", "version"):
        return rng.choice([*HOSTILE_NUMBERS, good.get(param, "1")])
    if param == "domain" and rng.random() < 0.7:
        return rng.choice(["persistent", "non-persistent"])
    if rng.random() < 0.4:
        return good.get(param, "x")
    return rng.choice(HOSTILE_NAMES)


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_seeded_rest_fuzz_never_answers_5xx(
    standalone_factory: Callable[..., StandaloneProcess], name: str, seed: int
) -> None:
    http = Http(standalone_factory().http_url)
    tenant = f"{name}-t"
    http.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]})
    http.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    http.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/tp")
    good = {"tenant": tenant, "namespace": "ns", "topic": "tp", "subscription": "sub"}
    good |= {"cluster": "standalone", "domain": "persistent"}
    operations = _operations(http)
    rng = random.Random(seed)
    for i in range(FUZZ_REQUESTS):
        method, template = rng.choice(operations)
        path = PARAM.sub(lambda m: _value(rng, m.group(1), good), template)
        body: Any = rng.choice(HOSTILE_BODIES) if method in ("PUT", "POST") else None
        answer = http.call(method, path, raw=body)
        what = f"seed {seed} request {i}: {method} {path[:200]} body {str(body)[:80]}"
        _assert_sane(answer, what)
    health = http.get("/admin/v2/brokers/health")
    assert (health.status, health.body) == (200, b"ok")


def test_partition_metadata_with_auto_creation_on_a_missing_namespace_is_404(
    http: Http, name: str
) -> None:
    answer = http.get(
        f"/admin/v2/persistent/public/{name}/t/partitions?checkAllowAutoCreation=true"
    )
    assert answer.status == 404, (answer.status, answer.body)
    assert answer.reason == f"Namespace public/{name} does not exist"
