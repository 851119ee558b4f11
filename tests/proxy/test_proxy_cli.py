"""``magnetar proxy``'s command line: its settings from flags, ``MAGNETAR_<OPTION>`` and a
Pulsar ``proxy.conf`` (in that order of precedence), one-line errors, and readiness that
waits for a broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.metadata.zookeeper_server import free_port

from .conftest import http, start_proxy


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_it_needs_a_way_to_find_brokers() -> None:
    done = _run()
    assert done.returncode == 2
    assert "needs --metadata-store or --broker-service-url" in done.stderr
    assert "Traceback" not in done.stderr
    done = _run("--metadata-store", "http://zk:2181")
    assert done.returncode == 2 and "is not a ZooKeeper URL" in done.stderr


def test_an_unreachable_metadata_store_is_one_line() -> None:
    done = _run(
        "--metadata-store", f"zk:127.0.0.1:{free_port()}", "--session-timeout-s", "1",
        "--port", "0", "--http-port", "0",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "Traceback" not in done.stderr


def test_proxy_conf_environment_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file names ports that cannot be bound (1); the environment and a flag win."""
    conf = tmp_path / "proxy.conf"
    dead = free_port()
    conf.write_text(
        f"brokerServiceURL=pulsar://127.0.0.1:{dead}\n"
        f"brokerWebServiceURL=http://127.0.0.1:{dead}\n"
        "servicePort=1\nwebServicePort=1\nbindAddress=127.0.0.1\n"
        "forwardAuthorizationCredentials=true\n"
    )
    monkeypatch.setenv("MAGNETAR_HTTP_PORT", "0")
    proxy = start_proxy(
        tmp_path / "proxy.log", "--config", str(conf), "--port", "0", free_ports=False
    )
    try:
        assert proxy.port != 1
        assert http("GET", f"{proxy.http_url}/status.html") == (200, b"OK")
        status, body = http("GET", f"{proxy.http_url}/ready")
        assert status == 503 and body["ready"] is False  # no broker answers
        status, body = http("GET", f"{proxy.http_url}/admin/v2/tenants")
        assert status == 503 and "reason" in body
    finally:
        proxy.stop()


def test_a_busy_port_is_one_line_naming_its_flag() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for flag, other, what in (
            ("--port", "--http-port", "the binary protocol"),
            ("--http-port", "--port", "HTTP"),
        ):
            done = _run(
                "--broker-service-url", "pulsar://127.0.0.1:1", "--bind-address", "127.0.0.1",
                flag, port, other, "0",
            )  # fmt: skip
            assert done.returncode == 1
            assert done.stderr.strip() == (
                f"Error: cannot listen for {what} on 127.0.0.1:{port} ({flag}): "
                "address already in use"
            )
