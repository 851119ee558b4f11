"""HTTPS on the admin port (``--https-port``, Pulsar's ``webServicePortTls``): the same
API over TLS with the broker's certificate, so tokens never travel in clear; the official
client looks topics up over ``https://`` with a token."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pulsar

from magnetar.testing import StandaloneProcess

from .conftest import SUPER_USER, Secrets


def _get(url: str, context: ssl.SSLContext, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_admin_api_over_https_with_tokens(
    standalone_factory: Callable[..., StandaloneProcess], secrets: Secrets, pki: Any
) -> None:
    node = standalone_factory(
        *secrets.args(
            "--https-port", "0", "--tls-port", "0",
            "--tls-cert-file", str(pki.server.cert), "--tls-key-file", str(pki.server.key),
        )
    )  # fmt: skip
    assert node.https_port is not None
    base = f"https://localhost:{node.https_port}"
    context = ssl.create_default_context(cafile=str(pki.ca))
    assert _get(f"{base}/admin/v2/tenants", context, secrets.token(SUPER_USER)) == (
        200,
        ["public"],
    )
    status, answer = _get(f"{base}/admin/v2/tenants", context)
    assert status == 401 and answer["reason"] == "Authentication required: no credentials"
    untrusted = ssl.create_default_context(cafile=str(pki.other_ca))
    try:
        _get(f"{base}/admin/v2/tenants", untrusted)
        raise AssertionError("a certificate signed by another CA was accepted")
    except urllib.error.URLError as exc:
        assert isinstance(exc.reason, ssl.SSLCertVerificationError)
    # the official client: lookups over https://, data over pulsar+ssl://
    root = secrets.token(SUPER_USER)
    client = pulsar.Client(
        base,
        tls_trust_certs_file_path=str(pki.ca),
        authentication=pulsar.AuthenticationToken(root),
        operation_timeout_seconds=15,
    )
    try:
        consumer = client.subscribe("public/default/over-https", "s")
        client.create_producer("public/default/over-https").send(b"secret")
        assert consumer.receive(10_000).data() == b"secret"
    finally:
        client.close()
    assert node.proc is not None and node.proc.poll() is None


def test_a_client_certificate_on_https_gives_the_rest_role(
    standalone_factory: Callable[..., StandaloneProcess], secrets: Secrets, pki: Any
) -> None:
    """With the tls provider and a trusted CA, an HTTPS request's verified client
    certificate authenticates it: the role is the certificate's CN."""
    cn = "magnetar-test-client"
    node = standalone_factory(
        *secrets.args(
            "--https-port", "0", "--tls-port", "0",
            "--tls-cert-file", str(pki.server.cert), "--tls-key-file", str(pki.server.key),
            "--tls-trust-certs-file", str(pki.ca),
            "--super-user-roles", f"{SUPER_USER},{cn}",
        )
    )  # fmt: skip
    assert node.https_port is not None
    base = f"https://localhost:{node.https_port}"
    with_cert = ssl.create_default_context(cafile=str(pki.ca))
    with_cert.load_cert_chain(str(pki.client.cert), str(pki.client.key))
    without_cert = ssl.create_default_context(cafile=str(pki.ca))
    assert _get(f"{base}/admin/v2/tenants", with_cert) == (200, ["public"])
    status, answer = _get(f"{base}/admin/v2/tenants", without_cert)
    assert status == 401 and answer["reason"] == "Authentication required: no credentials"
    # a token still wins when sent (providers in their configured order: token first)
    status, answer = _get(f"{base}/admin/v2/tenants", with_cert, secrets.token("nobody"))
    assert status == 403 and "'nobody'" in answer["reason"]
    assert node.proc is not None and node.proc.poll() is None
