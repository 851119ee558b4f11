"""The all-features values (token authentication and authorization, TLS, Functions Workers,
extra arguments, more namespaces) start a working cluster too: the Secrets a user creates
(`kubectl create secret`) are added to the rendered objects, the Pods run as local processes
(tests/deploy/kubelet.py), ``helm test`` produces and consumes through the proxy's TLS
listener with the super user's token, the official client does the same, a client without
a token is refused at the proxy, and the init Job created the extra namespace."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.auth.tokens import create_token, new_secret_key
from tests.deploy.chart import NAMESPACE, Object, merged, render, values_file
from tests.deploy.kubelet import LocalKubelet
from tests.deploy.round_trip import produce_and_consume
from tests.tls.certs import make_pki

READY_TIMEOUT_S = 180.0
TEST_POD_TIMEOUT_S = 90.0


def _secret(name: str, data: dict[str, bytes], kind: str = "Opaque") -> Object:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": kind,
            "metadata": {"name": name, "namespace": NAMESPACE}, "data": encoded}  # fmt: skip


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[tuple[LocalKubelet, str, Path]]:
    key = new_secret_key()
    admin_token = create_token("admin", secret_key=key)
    pki = make_pki(tmp_path / "pki")
    secrets = [
        _secret("magnetar-token-key", {"secret.key": key}),
        _secret("magnetar-token-admin", {"token": admin_token.encode()}),
        _secret("magnetar-token-proxy", {"token": create_token("proxy", secret_key=key).encode()}),
        _secret(
            "magnetar-tls",
            {
                "tls.crt": pki.server.cert.read_bytes(),
                "tls.key": pki.server.key.read_bytes(),
                "ca.crt": pki.ca.read_bytes(),
            },
            "kubernetes.io/tls",
        ),
    ]
    values = merged(values_file("all-features"), values_file("e2e"))
    kubelet = LocalKubelet([*secrets, *render(values)], tmp_path / "k", namespace=NAMESPACE)
    try:
        kubelet.install(ready_timeout_s=READY_TIMEOUT_S)
        yield kubelet, admin_token, pki.ca
    finally:
        kubelet.stop()


def test_all_features_start_a_cluster_with_tokens_and_tls_through_the_proxy(
    secure_cluster: tuple[LocalKubelet, str, Path],
) -> None:
    cluster, admin_token, ca = secure_cluster
    assert cluster.run_tests(timeout_s=TEST_POD_TIMEOUT_S) == {"mg-magnetar-test": 0}

    host, ports = cluster.service_address("mg-magnetar-proxy")
    client = pulsar.Client(
        f"pulsar+ssl://{host}:{ports['pulsarssl']}",
        authentication=pulsar.AuthenticationToken(admin_token),
        tls_trust_certs_file_path=str(ca),
        operation_timeout_seconds=30,
    )
    try:
        sent = [f"order-{i}".encode() for i in range(10)]
        produce_and_consume(client, "persistent://acme/orders/through-the-proxy", sent)
    finally:
        client.close()

    anonymous = pulsar.Client(f"pulsar://{host}:{ports['pulsar']}", operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.PulsarException):
            anonymous.create_producer("persistent://public/default/refused")
    finally:
        anonymous.close()

    request = urllib.request.Request(
        f"http://{host}:{ports['http']}/admin/v2/namespaces/acme",
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert "acme/orders" in json.load(answer)
