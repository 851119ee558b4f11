"""The typed admin REST client (:mod:`magnetar.admin_client`) against a real standalone:
typed methods, the status -> error-class mapping, and multi-host service URLs whose first
host is dead (before: the CLI and every library caller used a URL list as one host and
failed; the CLI only after its 30 s timeout when the host did not refuse)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from magnetar.admin_client import (
    AdminClient,
    AdminConflict,
    AdminError,
    AdminNotAllowed,
    AdminNotFound,
    AdminPreconditionFailed,
    AdminUnreachable,
    HostPort,
    parse_service_url,
)
from magnetar.common.errors import AuthorizationError, NotAllowed
from magnetar.testing import StandaloneProcess


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_service_url_lists_hosts_with_default_ports() -> None:
    url = parse_service_url("http://h1:8080,h2,[::1]:9/admin-prefix/")
    assert url.hosts == (HostPort("h1", 8080), HostPort("h2", 80), HostPort("::1", 9))
    assert url.prefix == "/admin-prefix"
    assert url.base_url(2) == "http://[::1]:9/admin-prefix"
    assert str(url) == "http://h1:8080,h2:80,[::1]:9/admin-prefix"
    assert parse_service_url("https://h").hosts == (HostPort("h", 443),)


@pytest.mark.parametrize("bad", ["h1:8080", "pulsar://h:6650", "http://h1:80,,h2", "http://h:x"])
def test_malformed_service_urls_are_one_line_errors(bad: str) -> None:
    with pytest.raises(AdminError, match="invalid admin URL"):
        parse_service_url(bad)


def test_typed_calls_and_error_classes(standalone: StandaloneProcess, name: str) -> None:
    admin = AdminClient(standalone.http_url, timeout_s=15)
    admin.put(f"/admin/v2/tenants/{name}", {"allowedClusters": ["standalone"]})
    assert admin.tenant_info(name) == {"adminRoles": [], "allowedClusters": ["standalone"]}
    with pytest.raises(AdminConflict, match=r"Tenant already exists \(HTTP 409\)"):
        admin.put(f"/admin/v2/tenants/{name}", {"allowedClusters": ["standalone"]})
    admin.put(f"/admin/v2/namespaces/{name}/ns")
    assert admin.namespaces(name) == [f"{name}/ns"]
    assert admin.namespace_permissions(name, "ns") == {}
    with pytest.raises(AdminNotFound) as missing:
        admin.tenant_info(f"{name}-none")
    assert missing.value.status == 404 and missing.value.reason == "Tenant does not exist"

    topic = f"persistent://{name}/ns/a b"  # the local name is quoted in the path
    admin.put(f"/admin/v2/persistent/{name}/ns/a%20b")
    assert admin.partitions(topic) == 0
    assert admin.topic_stats(topic)["publishers"] == []
    assert admin.topic_internal_stats(topic)["ledgers"] is not None
    admin.set_topic_deduplication(topic, True)
    assert admin.get(f"/admin/v2/persistent/{name}/ns/a%20b/deduplicationEnabled") is True
    admin.put(f"/admin/v2/persistent/{name}/ns/p/partitions", 2)
    assert admin.partitions(f"{name}/ns/p") == 2
    with pytest.raises(AdminNotAllowed) as refused:
        admin.post(f"/admin/v2/persistent/{name}/ns/p/terminate")
    assert isinstance(refused.value, NotAllowed) and not isinstance(
        refused.value, AuthorizationError
    )
    with pytest.raises(AdminPreconditionFailed, match="non empty namespace"):
        admin.delete(f"/admin/v2/namespaces/{name}/ns")
    admin.delete_topic(topic)
    with pytest.raises(AdminNotFound):
        admin.topic_stats(topic)


def test_dead_first_host_is_passed_over(standalone: StandaloneProcess) -> None:
    dead = closed_port()
    live = standalone.http_url.removeprefix("http://")
    admin = AdminClient(f"http://127.0.0.1:{dead},{live}", timeout_s=5)
    started = time.monotonic()
    assert "public" in admin.get("/admin/v2/tenants")
    assert time.monotonic() - started < 5
    # the host that answered is asked first from then on
    assert admin.transport.service_url.base_url(admin.transport._preferred) == (standalone.http_url)


def test_every_host_dead_names_each_cause() -> None:
    a, b = closed_port(), closed_port()
    admin = AdminClient(f"http://127.0.0.1:{a},127.0.0.1:{b}", timeout_s=5)
    with pytest.raises(AdminUnreachable) as caught:
        admin.get("/admin/v2/tenants")
    assert str(caught.value) == (
        f"cannot reach the admin service at http://127.0.0.1:{a},127.0.0.1:{b}: "
        f"127.0.0.1:{a}: Connection refused; 127.0.0.1:{b}: Connection refused"
    )
    assert caught.value.retriable


def test_cli_url_list_with_a_dead_first_host(standalone: StandaloneProcess) -> None:
    live = standalone.http_url.removeprefix("http://")
    url = f"http://127.0.0.1:{closed_port()},{live}"
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--url", url, "tenants", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "public" in done.stdout.split()


class _Broker(http.server.BaseHTTPRequestHandler):
    """Redirects its first ``redirects`` requests to ``owner_url``, then answers JSON."""

    redirects = 0
    owner_url = ""
    seen = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.seen += 1
        if cls.seen <= cls.redirects:
            self.send_response(307)
            self.send_header("Location", cls.owner_url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"publishers": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[tuple[str, type[_Broker]]]:
    handler = type("Handler", (_Broker,), {"owner_url": f"http://127.0.0.1:{closed_port()}"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_redirect_to_a_dead_owner_is_asked_again(broker: tuple[str, type[_Broker]]) -> None:
    url, handler = broker
    handler.redirects = 2  # the owner moves after two answers naming the dead one
    admin = AdminClient(url, timeout_s=10)
    assert admin.topic_stats("t") == {"publishers": []}
    assert handler.seen == 3


def test_redirects_to_a_dead_owner_end_at_the_deadline(broker: tuple[str, type[_Broker]]) -> None:
    url, handler = broker
    handler.redirects = 1_000_000
    admin = AdminClient(url, timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(AdminUnreachable, match=r"the owner broker at .* cannot be reached"):
        admin.topic_stats("t")
    assert time.monotonic() - started < 3
