"""How ``magnetar standalone`` starts, is interrupted and fails to start (real processes):
a bind error names the option; a SIGINT during start-up stops it without a ready line, also
when it runs as a shell's background job; a failed start leaves no new data directory;
``--bookie-port`` pins the in-process bookie's port."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from magnetar.testing import StandaloneProcess, wait_until

from .conftest import RUN_TIMEOUT_S

pytestmark = pytest.mark.timeout(120)

STOP_TIMEOUT_S = 30.0


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("option", "purpose"), [("--port", "the binary protocol"), ("--http-port", "HTTP")]
)
def test_a_busy_port_names_its_option_in_one_spelling(
    tmp_path: Path, busy_port: int, option: str, purpose: str
) -> None:
    ports = {"--port": "0", "--http-port": "0", option: str(busy_port)}
    done = _magnetar(
        "standalone", "--data-dir", str(tmp_path / "d"), *(x for kv in ports.items() for x in kv)
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: cannot listen for {purpose} on 127.0.0.1:{busy_port} ({option}): "
        "address already in use"
    ]


def test_a_failed_start_leaves_no_new_data_directory(tmp_path: Path, busy_port: int) -> None:
    fresh = tmp_path / "parent" / "fresh"
    done = _magnetar("standalone", "--data-dir", str(fresh), "--http-port", str(busy_port))
    assert done.returncode == 1, done.stderr
    assert not fresh.exists()
    # a directory that was there before is kept, with what it held
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes").write_text("mine")
    done = _magnetar("standalone", "--data-dir", str(kept), "--http-port", str(busy_port))
    assert done.returncode == 1, done.stderr
    assert (kept / "notes").read_text() == "mine"


def _start(data_dir: Path, *shell: str) -> subprocess.Popen[str]:
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(data_dir),
        "--port", "0", "--http-port", "0", "--log-level", "INFO",
    ]  # fmt: skip
    return subprocess.Popen(
        [*shell, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_sigint_during_start_up_stops_it_without_a_ready_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = _start(data_dir)
    try:
        # the data directory is made first thing in the start, a second before the ready line
        wait_until(lambda: data_dir.exists() or proc.poll() is not None, 30, 0.005, "start")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=STOP_TIMEOUT_S)
    finally:
        proc.kill()
    assert "ready" not in out, out
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "stopped during start-up" in err
    assert not data_dir.exists()  # the start made it


def _sigint_handled(pid: int) -> bool:
    """Whether the process catches SIGINT (not ignored, not the default)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (signal.SIGINT - 1)))


def test_the_command_takes_sigint_back_from_a_shell_that_ignores_it() -> None:
    """A shell starts a background job with SIGINT ignored; ``magnetar`` restores it before
    it imports a command, so a Ctrl+C or ``kill -INT`` in its first half second counts."""
    probe = (
        "import signal; import magnetar.cli.main as m; "
        "m.cli = lambda: print(signal.getsignal(signal.SIGINT)); m.main()"
    )
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "{probe}" & wait'],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True,
    )  # fmt: skip
    assert "default_int_handler" in done.stdout, done.stdout + done.stderr


def test_a_background_job_stops_on_an_early_sigint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shell = subprocess.Popen(
        ["bash", "-c", '"$@" & echo $! ; wait $!', "bash",
         sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(data_dir),
         "--port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert shell.stdout is not None
        pid = int(shell.stdout.readline())
        wait_until(lambda: _sigint_handled(pid), 10, 0.005, "SIGINT handled")
        subprocess.run(["kill", "-INT", str(pid)], check=True)
        out, err = shell.communicate(timeout=STOP_TIMEOUT_S)
    finally:
        shell.kill()
    assert "ready" not in out, out
    assert "Traceback" not in err, err


def test_bookie_port_pins_the_in_process_bookie(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    port = _free_port()
    node = standalone_factory("--bookie-port", str(port), "--no-functions-worker")
    assert (node.data_dir / "bookie-port").read_text() == str(port)
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
