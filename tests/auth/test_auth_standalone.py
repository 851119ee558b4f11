"""Authentication and authorization end to end: ``magnetar standalone`` as a real process,
the official ``pulsar`` wheel and raw binary-protocol sockets.

* a deny-by-default matrix: every role x action x resource, over the binary protocol and
  REST, allows exactly what was granted;
* revoking a permission takes effect on the next request;
* tokens (malformed, expired, wrongly signed), unknown methods, no credentials and huge auth
  data get Error AuthenticationError and a closed connection; the process keeps serving;
* basic (htpasswd) and mutual TLS (role = certificate CN) authenticate as their role;
* the anonymous role answers clients without credentials or with an unknown method.
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.client import AuthenticationToken, Client
from magnetar.common.errors import AuthenticationError, AuthorizationError, ServerError
from magnetar.protocol import (
    Connect,
    Connected,
    Error,
    FrameDecoder,
    GetTopicsOfNamespace,
    GetTopicsOfNamespaceResponse,
)
from magnetar.protocol import encode as encode_command
from magnetar.testing import StandaloneProcess

from .conftest import PASSWORD, SUPER_USER, Secrets, connect_raw, http

TENANT, OTHER_TENANT = "acme", "other"
NS = f"{TENANT}/ns"
T1 = f"persistent://{NS}/one"
T2 = f"persistent://{NS}/two"
T3 = f"persistent://{OTHER_TENANT}/ns/three"
TOPICS = (T1, T2, T3)
# role -> what it was granted (besides the super user and acme's tenant admin)
GRANTS = {
    ("writer", "produce", T1),
    ("writer", "produce", T2),
    ("reader", "consume", T1),
}
ROLES = (SUPER_USER, "tadmin", "writer", "reader", "nobody")


def allowed(role: str, action: str, topic: str) -> bool:
    """The naive model the broker must match."""
    if role == SUPER_USER or (role == "tadmin" and topic != T3):
        return True
    if action == "lookup":
        return any((role, a, topic) in GRANTS for a in ("produce", "consume"))
    return (role, action, topic) in GRANTS


def _setup(node: StandaloneProcess, secrets: Secrets) -> None:
    root = secrets.token(SUPER_USER)
    base = f"{node.http_url}/admin/v2"
    for tenant, admins in ((TENANT, ["tadmin"]), (OTHER_TENANT, [])):
        status, _ = http("PUT", f"{base}/tenants/{tenant}", root,
                         {"adminRoles": admins, "allowedClusters": ["standalone"]})  # fmt: skip
        assert status == 204
        assert http("PUT", f"{base}/namespaces/{tenant}/ns", root, {})[0] == 204
    assert http("POST", f"{base}/namespaces/{NS}/permissions/writer", root, ["produce"])[0] == 204
    status, _ = http("POST", f"{base}/persistent/{NS}/one/permissions/reader", root, ["consume"])
    assert status == 204


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, secrets: Secrets) -> Iterator[StandaloneProcess]:
    data_dir = tmp_path_factory.mktemp("auth-standalone") / "data"
    with StandaloneProcess(data_dir, *secrets.args()) as started:
        _setup(started, secrets)
        yield started


def _client(node: StandaloneProcess, auth: pulsar.Authentication) -> pulsar.Client:
    return pulsar.Client(node.url, authentication=auth, operation_timeout_seconds=10)


def _try(action: Callable[[], object]) -> str:
    try:
        action()
    except pulsar.AuthorizationError:
        return "denied"
    return "allowed"


# --- deny by default ---------------------------------------------------------------------


def test_binary_protocol_allows_exactly_what_was_granted(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    seen, expected = {}, {}
    for role in ROLES:
        client = _client(node, pulsar.AuthenticationToken(secrets.token(role)))
        try:
            for topic in TOPICS:
                actions: dict[str, Callable[[], object]] = {
                    "lookup": lambda c=client, t=topic: c.get_topic_partitions(t),
                    "produce": lambda c=client, t=topic: c.create_producer(t).close(),
                    "consume": lambda c=client, t=topic, r=role: c.subscribe(t, f"s-{r}").close(),
                }
                for action, run in actions.items():
                    seen[role, action, topic] = _try(run)
                    expected[role, action, topic] = (
                        "allowed" if allowed(role, action, topic) else "denied"
                    )
        finally:
            client.close()
    assert seen == expected


REST_CASES = [
    # (method, path, body, who may: "super" | "tenant" | "lookup:<topic>")
    ("GET", f"/admin/v2/namespaces/{NS}", None, "tenant"),
    ("GET", f"/admin/v2/namespaces/{NS}/permissions", None, "tenant"),
    ("POST", f"/admin/v2/namespaces/{NS}/permissions/x", ["consume"], "tenant"),
    ("GET", f"/admin/v2/persistent/{NS}/one/partitions", None, f"lookup:{T1}"),
    ("GET", f"/lookup/v2/topic/persistent/{NS}/one", None, f"lookup:{T1}"),
    ("GET", f"/lookup/v2/topic/persistent/{NS}/two", None, f"lookup:{T2}"),
    ("GET", f"/lookup/v2/topic/persistent/{OTHER_TENANT}/ns/three", None, f"lookup:{T3}"),
    ("GET", f"/admin/v2/namespaces/{OTHER_TENANT}", None, "tenant-other"),
    ("PUT", "/admin/v2/tenants/newcomer", {"allowedClusters": ["standalone"]}, "super"),
    ("GET", "/admin/v2/clusters", None, "super"),
]


def _rest_allowed(role: str, who: str) -> bool:
    if role == SUPER_USER:
        return True
    if who == "tenant":
        return role == "tadmin"
    if who.startswith("lookup:"):
        return allowed(role, "lookup", who.removeprefix("lookup:"))
    return False  # super only, or a tenant without admins


def test_rest_allows_exactly_what_was_granted(node: StandaloneProcess, secrets: Secrets) -> None:
    seen, expected = {}, {}
    for role, (method, path, body, who) in itertools.product(ROLES, REST_CASES):
        status, answer = http(method, node.http_url + path, secrets.token(role), body)
        assert status != 401, answer
        seen[role, method, path] = "denied" if status == 403 else "allowed"
        expected[role, method, path] = "allowed" if _rest_allowed(role, who) else "denied"
        if status == 403:
            assert f"role {role!r} is not authorized" in answer["reason"]
    assert seen == expected
    # nobody is refused before authorizing: no or bad credentials are a 401
    status, answer = http("GET", f"{node.http_url}/admin/v2/namespaces/{NS}")
    assert status == 401 and answer["reason"].startswith("Authentication required")
    status, answer = http("GET", f"{node.http_url}/admin/v2/namespaces/{NS}", "garbage")
    assert status == 401 and "malformed token" in answer["reason"]
    assert http("GET", f"{node.http_url}/metrics")[0] == 200  # open, as Pulsar's default


def test_revoking_takes_effect_on_the_next_request(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    root, base = secrets.token(SUPER_USER), f"{node.http_url}/admin/v2"
    topic = f"persistent://{NS}/revoke-{uuid.uuid4().hex[:8]}"
    local = topic.rsplit("/", 1)[1]
    assert http("POST", f"{base}/persistent/{NS}/{local}/permissions/rev", root,
                ["produce", "consume"])[0] == 204  # fmt: skip
    status, grants = http("GET", f"{base}/persistent/{NS}/{local}/permissions", root)
    assert status == 200 and grants["rev"] == ["consume", "produce"]
    client = _client(node, pulsar.AuthenticationToken(secrets.token("rev")))
    try:
        producer = client.create_producer(topic)
        producer.send(b"before")
        assert http("DELETE", f"{base}/persistent/{NS}/{local}/permissions/rev", root)[0] == 204
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "after-revoke")
        status, _ = http("GET", f"{node.http_url}/lookup/v2/topic/persistent/{NS}/{local}",
                         secrets.token("rev"))  # fmt: skip
        assert status == 403
    finally:
        client.close()


# --- bad credentials ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "data_of", "reason"),
    [
        ("token", lambda s: b"not-a-real-token", "malformed token"),
        ("token", lambda s: s.token("writer", expires_at_s=int(time.time()) - 5).encode(),
         "token expired"),
        ("token", lambda s: s.token("writer").encode()[:-3] + b"abc", "signature"),
        ("token", lambda s: b"\xff\xfe", "not UTF-8"),
        ("basic", lambda s: b"alice:wrong", "wrong password"),
        ("basic", lambda s: b"no-colon", "user:password"),
        ("tls", lambda s: b"", "no trusted client certificate"),
        ("kerberos", lambda s: b"x", "unknown authentication method 'kerberos'"),
        (None, lambda s: None, "no credentials"),
        ("token", lambda s: b"x" * 100_000, "larger than 65536 bytes"),
    ],
)  # fmt: skip
def test_bad_credentials_get_authentication_error_and_a_closed_connection(
    node: StandaloneProcess,
    secrets: Secrets,
    method: str | None,
    data_of: Callable[[Secrets], bytes | None],
    reason: str,
) -> None:
    commands = connect_raw(node.port, method, data_of(secrets))
    assert len(commands) == 1, commands
    error = commands[0]
    assert isinstance(error, Error) and error.error is ServerError.AuthenticationError
    assert error.message.startswith("Unable to authenticate") and reason in error.message
    assert error.request_id == 2**64 - 1  # Pulsar's -1
    # still serving: the process runs and a good client works
    assert node.proc is not None and node.proc.poll() is None
    good = connect_raw(node.port, "token", secrets.token("writer").encode())
    assert isinstance(good[-1], Connected)


def test_the_official_client_fails_with_a_bad_token(node: StandaloneProcess) -> None:
    # The C++ client drops the connection on the Error and retries until its operation
    # timeout; every attempt is refused the same way.
    client = pulsar.Client(
        node.url,
        authentication=pulsar.AuthenticationToken("not-a-real-token"),
        operation_timeout_seconds=2,
    )
    try:
        with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
            client.create_producer(T1)
    finally:
        client.close()


def test_basic_authentication_with_htpasswd(node: StandaloneProcess, secrets: Secrets) -> None:
    root = secrets.token(SUPER_USER)
    assert http("POST", f"{node.http_url}/admin/v2/namespaces/{NS}/permissions/alice", root,
                ["produce"])[0] == 204  # fmt: skip
    client = _client(node, pulsar.AuthenticationBasic("alice", PASSWORD))
    try:
        client.create_producer(T2).send(b"as alice")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(T2, "alice-may-not-consume")
    finally:
        client.close()
    status, _ = http("GET", f"{node.http_url}/lookup/v2/topic/persistent/{NS}/two",
                     header="Basic " + __import__("base64").b64encode(
                         f"alice:{PASSWORD}".encode()).decode())  # fmt: skip
    assert status == 200


# --- the anonymous role and mutual TLS ---------------------------------------------------


def test_anonymous_role_and_mutual_tls(
    standalone_factory: Callable[..., StandaloneProcess], secrets: Secrets, pki: object
) -> None:
    node = standalone_factory(
        *secrets.args(
            "--anonymous-user-role", "anon",
            "--tls-port", "0",
            "--tls-cert-file", str(pki.server.cert),  # type: ignore[attr-defined]
            "--tls-key-file", str(pki.server.key),  # type: ignore[attr-defined]
            "--tls-trust-certs-file", str(pki.ca),  # type: ignore[attr-defined]
        )
    )  # fmt: skip
    root = secrets.token(SUPER_USER)
    base = f"{node.http_url}/admin/v2"
    assert http("POST", f"{base}/namespaces/public/default/permissions/anon", root,
                ["produce", "consume"])[0] == 204  # fmt: skip
    assert http("PUT", f"{base}/namespaces/public/private", root, {})[0] == 204
    client_role = "magnetar-test-client"  # the test client certificate's CN
    assert http("POST", f"{base}/namespaces/public/private/permissions/{client_role}", root,
                ["produce"])[0] == 204  # fmt: skip
    # no credentials, or a method nobody serves: the anonymous role
    for auth in (None, pulsar.AuthenticationBasic("alice", PASSWORD, "unknown")):
        client = pulsar.Client(node.url, authentication=auth, operation_timeout_seconds=10)
        try:
            client.create_producer("public/default/anon-ok").send(b"x")
            with pytest.raises(pulsar.AuthorizationError):
                client.create_producer("public/private/anon-denied")
        finally:
            client.close()
    # REST without credentials: the anonymous role too
    assert http("GET", f"{node.http_url}/lookup/v2/topic/persistent/public/default/x")[0] == 200
    # mutual TLS: the certificate's CN is the role
    client = pulsar.Client(
        node.tls_url,
        tls_trust_certs_file_path=str(pki.ca),  # type: ignore[attr-defined]
        authentication=pulsar.AuthenticationTLS(
            str(pki.client.cert),
            str(pki.client.key),  # type: ignore[attr-defined]
        ),
        operation_timeout_seconds=10,
    )
    try:
        client.create_producer("public/private/by-certificate").send(b"x")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe("public/private/by-certificate", "may-not-consume")
    finally:
        client.close()


async def test_magnetar_client_raises_the_brokers_authentication_error(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    # Not retried until the operation timeout: the broker's answer is final.
    async with Client(
        node.url,
        authentication=AuthenticationToken("not-a-real-token"),
        operation_timeout_seconds=5,
    ) as client:
        with pytest.raises(AuthenticationError, match="Unable to authenticate: malformed token"):
            await client.create_producer(T1)
    async with Client(
        node.url, authentication=AuthenticationToken(secrets.token("writer"))
    ) as client:
        producer = await client.create_producer(T1)
        await producer.send(b"as writer")
        with pytest.raises(AuthorizationError):
            await client.subscribe(T1, "writer-may-not-consume")


def test_a_namespace_that_does_not_exist_is_topic_not_found(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    # as Pulsar answers (the official client's asyncio test_create_producer_failure)
    client = _client(node, pulsar.AuthenticationToken(secrets.token("nobody")))
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("ghost/ns/nothing-here")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(T1)
    finally:
        client.close()


def _request(port: int, token: str, cmd: object) -> object:
    """CONNECT as ``token``'s role, send one request; its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        connect = Connect(client_version="auth-test", protocol_version=20,
                          auth_method_name="token", auth_data=token.encode())  # fmt: skip
        sock.sendall(encode_command(connect) + encode_command(cmd))  # type: ignore[arg-type]
        decoder, commands = FrameDecoder(), []
        while len(commands) < 2:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {commands}"
            commands += [f.command for f in decoder.feed(chunk)]
        assert isinstance(commands[0], Connected)
        return commands[1]


def test_listing_a_namespaces_topics_needs_a_grant_on_the_namespace(
    node: StandaloneProcess, secrets: Secrets
) -> None:
    listing = GetTopicsOfNamespace(request_id=7, namespace=NS)
    for role, allowed in (("writer", True), ("tadmin", True), ("reader", False), ("nobody", False)):
        answer = _request(node.port, secrets.token(role), listing)
        if allowed:
            assert isinstance(answer, GetTopicsOfNamespaceResponse), (role, answer)
        else:
            assert isinstance(answer, Error) and answer.error is ServerError.AuthorizationError
            assert f"role {role!r} is not authorized to list the topics of {NS}" in answer.message
    ghost = _request(node.port, secrets.token("nobody"),
                     GetTopicsOfNamespace(request_id=8, namespace="ghost/ns"))  # fmt: skip
    assert isinstance(ghost, Error) and ghost.error is ServerError.TopicNotFound
