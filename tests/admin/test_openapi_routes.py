"""Every route of the OpenAPI document answers: called with real resources (a fresh tenant,
namespace, topic and subscription), then with malformed path values and bodies. No call
may answer 5xx, every error must be Pulsar's ``{"reason": "..."}`` JSON, and the process
keeps serving (health check and a produce/consume round trip at the end)."""

from __future__ import annotations

import re
from typing import Any

import pulsar

from magnetar.testing import StandaloneProcess

from .conftest import Http

PARAM = re.compile(r"{([^}]+)}")
NUMERIC = {"n": "1", "count": "1", "seconds": "0", "timestamp": "0", "version": "0"}
BAD_VALUES = {"n": "x", "count": "-x", "seconds": "1.5", "timestamp": "nope", "version": "v"}


def _operations(http: Http) -> list[tuple[str, str]]:
    doc = http.ok("GET", "/openapi.json")
    ops = [(method.upper(), path) for path, item in doc["paths"].items() for method in item]
    assert len(ops) > 100, len(ops)  # the document lists the whole API
    # destructive calls last, deepest paths first, so earlier calls find their resources
    return sorted(ops, key=lambda op: (op[0] == "DELETE", -op[1].count("/") * (op[0] == "DELETE")))


def _fill(path: str, values: dict[str, str]) -> str:
    return PARAM.sub(lambda m: values[m.group(1)], path)


def _check(http: Http, method: str, path: str, body: Any = None, raw: bytes | None = None) -> int:
    answer = http.call(method, path, body, raw=raw)
    assert answer.status < 500, (method, path, answer.status, answer.body[:300])
    if answer.status >= 400:
        try:
            reason = answer.json().get("reason")
        except ValueError:
            reason = None
        assert isinstance(reason, str) and reason, (method, path, answer.status, answer.body[:300])
    return answer.status


def test_every_route_answers_without_server_errors(
    http: Http, client: pulsar.Client, name: str, standalone: StandaloneProcess
) -> None:
    tenant, namespace, topic = f"{name}-t", "ns", "tp"
    http.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]})
    http.ok("PUT", f"/admin/v2/namespaces/{tenant}/{namespace}")
    cluster = f"{name}-c"  # bodies are posted to it: not the standalone's own cluster
    http.ok("PUT", f"/admin/v2/clusters/{cluster}", {"serviceUrl": "http://127.0.0.1:1"})
    full = f"persistent://{tenant}/{namespace}/{topic}"
    consumer = client.subscribe(full, "sub")
    producer = client.create_producer(full)
    producer.send(b"hello")
    producer.close()
    consumer.close()
    good = {
        "domain": "persistent",
        "tenant": tenant,
        "namespace": namespace,
        "topic": topic,
        "subscription": "sub",
        "cluster": cluster,
        "bundle": "0x00000000_0xffffffff",
        # the standalone's Functions Worker (/admin/v3/{kinds}/...)
        "kinds": "functions",
        "name": "fn",
        "instance_id": "0",
        "role": "some-role",
        "bookie": "127.0.0.1:1",
        "policy": "some-policy",
        "key": "some-key",  # a function's state key
        "ledgerId": "0",
        "entryId": "0",
        # a dynamic setting whose value here changes nothing the test relies on
        "configName": "ttlDurationDefaultInSeconds",
        "configValue": "0",
        **NUMERIC,
    }
    bad = dict(
        good, tenant="bad%20tenant!", topic="%2F", bundle="0x1_0x0", kinds="nope", name="%2F",
        instance_id="x", bookie="%2F", ledgerId="x", entryId="-x", configName="%2F",
        configValue="x", **BAD_VALUES,
    )  # fmt: skip
    statuses: dict[int, int] = {}
    operations = _operations(http)
    for method, template in operations:
        if method == "DELETE":
            continue
        path = _fill(template, good)
        status = _check(http, method, path)
        statuses[status] = statuses.get(status, 0) + 1
        if method in ("POST", "PUT"):
            _check(http, method, path, raw=b"{not json")
            _check(http, method, path, raw=b'{"a": [1, 2, {"b": null}]}')
            _check(http, method, path, raw=b"-1")
        _check(http, method, _fill(template, bad))
    for method, template in operations:
        if method == "DELETE":
            _check(http, method, _fill(template, bad))
            _check(http, method, _fill(template, good))
    assert statuses.get(200, 0) > 20 and statuses.get(204, 0) > 10, statuses
    # still serving, on both ports
    health = http.get("/admin/v2/brokers/health")
    assert (health.status, health.body) == (200, b"ok")
    again = f"persistent://public/default/{name}"
    consumer = client.subscribe(again, "s")
    client.create_producer(again).send(b"still here")
    assert consumer.receive(10_000).data() == b"still here"
    # building and serving every route printed no Python warning to the operator's stderr
    warnings = [line for line in standalone.log_path.read_text().splitlines() if "Warning:" in line]
    assert not warnings, warnings[:3]
    consumer.close()
