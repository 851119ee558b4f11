"""Expected errors at start-up and in every command: one ``Error: ...`` line naming what is
wrong, a non-zero exit code, no traceback (``magnetar`` run as a real subprocess)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.testing import StandaloneProcess

from .conftest import RUN_TIMEOUT_S, Cli


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str], exit_code: int = 1) -> str:
    """The single stderr line of a failed command (checked: no traceback, the exit code)."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def test_busy_binary_port_is_one_line_naming_the_port(tmp_path: Path, busy_port: int) -> None:
    result = _magnetar(
        "standalone", "--data-dir", str(tmp_path / "d"), "--port", str(busy_port),
        "--http-port", "0",
    )  # fmt: skip
    line = _one_error_line(result)
    assert f"127.0.0.1:{busy_port}" in line and "already in use" in line, line


def test_busy_http_port_is_one_line_naming_the_port(tmp_path: Path, busy_port: int) -> None:
    result = _magnetar(
        "standalone", "--data-dir", str(tmp_path / "d"), "--port", "0",
        "--http-port", str(busy_port),
    )  # fmt: skip
    line = _one_error_line(result)
    assert f"127.0.0.1:{busy_port}" in line and "HTTP" in line, line
    assert "already in use" in line, line


def test_second_standalone_on_one_data_dir_names_the_lock(
    cli: Cli, standalone: StandaloneProcess
) -> None:
    result = _magnetar(
        "standalone", "--data-dir", str(standalone.data_dir), "--port", "0", "--http-port", "0"
    )
    line = _one_error_line(result)
    assert f"{standalone.data_dir.resolve()}" in line and "metadata.db.lock" in line, line
    assert "another process" in line, line
    # the running one is unharmed
    assert cli.admin("tenants", "list").returncode == 0


def test_bad_log_level_is_a_usage_error(tmp_path: Path) -> None:
    result = _magnetar("standalone", "--data-dir", str(tmp_path / "d"), "--log-level", "loud")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "Invalid value for '--log-level'" in result.stderr


def test_commands_against_a_down_broker_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        down = int(s.getsockname()[1])
    admin = _magnetar("admin", "--admin-url", f"http://127.0.0.1:{down}", "topics", "list", "x/y")
    assert f"127.0.0.1:{down}" in _one_error_line(admin)
    perf = _magnetar("perf", "produce", "t", "-u", f"pulsar://127.0.0.1:{down}", "-m", "1")
    assert "Traceback" not in perf.stderr and perf.returncode == 1, perf.stderr
    waiting, error = perf.stderr.strip().splitlines()  # what it waits for, then why it gave up
    assert f"waiting for pulsar://127.0.0.1:{down}" in waiting
    assert error.startswith("Error: ") and f"127.0.0.1:{down}" in error
    no_zk = _magnetar(
        "bookie", "--data-dir", str(tmp_path / "b"), "--port", "0",
        "--metadata-url", f"zk://127.0.0.1:{down}/m", "--session-timeout-s", "2",
    )  # fmt: skip
    # a server logs to stderr as it starts; its last line says why it stopped
    assert no_zk.returncode == 1 and "Traceback" not in no_zk.stderr, no_zk.stderr
    last = no_zk.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and f"127.0.0.1:{down}" in last, last
    bad_url = _magnetar("bookie", "--data-dir", str(tmp_path / "b"), "--metadata-url", "nosuch://x")
    assert bad_url.returncode == 2 and "Traceback" not in bad_url.stderr, bad_url.stderr
    assert "Invalid value for '--metadata-url'" in bad_url.stderr
