"""Schema endpoints for topics without a schema (the broker stores none yet), over REST and
through the official client's ``http://`` service-URL path, which must behave as its
binary-protocol path does (and as both do against Pulsar: "topic not found or no schema")."""

from __future__ import annotations

import logging

import pulsar
import pytest

from magnetar.testing import StandaloneProcess

from .conftest import Http

_log = logging.getLogger("pulsar-client")


def test_schema_endpoints_without_schema(http: Http, client: pulsar.Client, name: str) -> None:
    base = f"/admin/v2/schemas/public/default/{name}"
    client.create_producer(f"persistent://public/default/{name}").close()
    for path in (f"{base}/schema", f"{base}/schema/0", f"{base}/schema/-1"):
        answer = http.get(path)
        assert (answer.status, answer.reason) == (404, "Schema not found"), path
    assert http.get(f"{base}/schema/x").status == 400
    assert http.ok("GET", f"{base}/schemas") == {"getSchemaResponses": []}
    assert http.ok("DELETE", f"{base}/schema") == {"version": -1}
    # a topic that was never used has no schema either; a missing namespace is a 404 too
    assert http.get(f"/admin/v2/schemas/public/default/{name}-none/schema").reason == (
        "Schema not found"
    )
    missing = http.get(f"/admin/v2/schemas/public/nons-{name}/x/schema")
    assert missing.status == 404 and "Namespace" in missing.reason


def test_official_client_get_schema_over_http_and_binary(
    standalone: StandaloneProcess, name: str
) -> None:
    topic = f"persistent://public/default/{name}"
    outcomes = []
    for url in (standalone.url, standalone.http_url):
        c = pulsar.Client(url, operation_timeout_seconds=15, logger=_log)
        try:
            c.create_producer(topic).close()
            with pytest.raises(pulsar.TopicNotFound):
                c._client.get_schema_info(topic, -1)
            outcomes.append(url.split(":")[0])
        finally:
            c.close()
    assert outcomes == ["pulsar", "http"]
