"""``magnetar client read``, ``magnetar perf read`` and the client.conf file, as subprocesses
against a real standalone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from .conftest import RUN_TIMEOUT_S, Cli


def _down_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _magnetar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_client_read_from_earliest_and_from_a_message_id(cli: Cli, topic: str) -> None:
    produced = cli.run(
        "client", "--url", cli.node.url, "--output", "json",
        "produce", topic, "-m", "a,b,c", "--disable-batching",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    ids = json.loads(produced.stdout)["messageIds"]

    read = cli.client("read", topic, "-m", "earliest", "-n", "3")
    assert read.returncode == 0, read.stderr
    assert [ln for ln in read.stdout.splitlines() if ln.startswith("key:")] == [
        f"key:[null], properties:[], content:{w}" for w in "abc"
    ]
    assert "3 messages successfully read" in read.stderr

    ledger, entry = ids[1].split(":")[:2]
    after = cli.client("read", topic, "-m", f"{ledger}:{entry}", "-n", "1", "--output", "json")
    assert after.returncode == 0, after.stderr
    assert [json.loads(ln)["payload"] for ln in after.stdout.splitlines()] == ["c"]
    inclusive = cli.client(
        "read", topic, "-m", f"{ledger}:{entry}", "-i", "-n", "2", "--output", "json"
    )
    assert [json.loads(ln)["payload"] for ln in inclusive.stdout.splitlines()] == ["b", "c"]

    # a reader leaves no subscription behind
    subs = cli.admin("--output", "json", "topics", "subscriptions", topic)
    assert subs.returncode == 0 and json.loads(subs.stdout) == [], subs.stdout
    bad = cli.client("read", topic, "-m", "soon")
    assert bad.returncode == 2 and "Invalid value for '-m'" in bad.stderr, bad.stderr


def test_perf_read_reads_the_backlog(cli: Cli, topic: str) -> None:
    produced = cli.run("perf", "produce", topic, "-u", cli.node.url, "-r", "0", "-m", "300")
    assert produced.returncode == 0, produced.stderr
    read = cli.run("perf", "read", topic, "-u", cli.node.url, "-n", "300", "--output", "json")
    assert read.returncode == 0, read.stderr
    summary = json.loads(read.stdout)
    assert summary["mode"] == "read" and summary["messages"] == 300
    assert "1 readers started" in read.stderr


def test_client_conf_gives_the_urls(cli: Cli, topic: str, tmp_path: Path) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text(
        "# as pulsar-admin reads it\n"
        f"webServiceUrl={cli.node.http_url}/\n"
        f"brokerServiceUrl={cli.node.url}/\n"
        "tlsAllowInsecureConnection=false\n"
    )
    listed = _magnetar("--config", str(conf), "admin", "tenants", "list")
    assert listed.returncode == 0 and "public" in listed.stdout.split(), listed.stderr
    produced = _magnetar("--config", str(conf), "client", "produce", topic, "-m", "x")
    assert produced.returncode == 0, produced.stderr
    read = _magnetar(
        "client", "read", topic, "-m", "earliest", env={"MAGNETAR_CLIENT_CONF": str(conf)}
    )
    assert read.returncode == 0 and "content:x" in read.stdout, read.stderr
    perf = _magnetar("--config", str(conf), "perf", "read", topic, "-n", "1")
    assert perf.returncode == 0, perf.stderr

    # the default file, under $XDG_CONFIG_HOME (or ~/.config)
    home = tmp_path / "home"
    (home / ".config" / "magnetar").mkdir(parents=True)
    (home / ".config" / "magnetar" / "client.conf").write_text(conf.read_text())
    from_home = _magnetar("admin", "tenants", "list", env={"HOME": str(home)})
    assert from_home.returncode == 0 and "public" in from_home.stdout.split(), from_home.stderr

    # the command line wins over the environment, which wins over the file
    down = f"http://127.0.0.1:{_down_port()}"
    assert (
        _magnetar("--config", str(conf), "admin", "--admin-url", down, "tenants", "list").returncode
        == 1
    )
    assert (
        _magnetar(
            "--config", str(conf), "admin", "tenants", "list", env={"MAGNETAR_ADMIN_URL": down}
        ).returncode
        == 1
    )


def test_bad_client_conf_is_a_usage_error(tmp_path: Path) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=http://localhost:8080\nthis line has no separator\n")
    result = _magnetar("--config", str(conf), "admin", "tenants", "list")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{conf}, line 2: expected key=value" in result.stderr
    missing = _magnetar("--config", str(tmp_path / "nope.conf"), "admin", "tenants", "list")
    assert missing.returncode == 2 and "cannot read" in missing.stderr, missing.stderr


def test_client_read_forever_until_sigint_exits_zero(cli: Cli, topic: str) -> None:
    reader = cli.background("client", "--url", cli.node.url, "read", topic, "-n", "0")
    reader.wait_for_line(f"reading {topic}")
    assert cli.client("produce", topic, "-m", "one,two").returncode == 0
    reader.wait_for_line("content:two", stderr=False)
    assert reader.interrupt(signal.SIGINT) == 0
    assert reader.err[-1] == "2 messages successfully read"
    assert not any("Traceback" in ln for ln in reader.err)


def test_client_read_paced_by_rate_stops_on_sigterm(cli: Cli, topic: str) -> None:
    produced = cli.client("produce", topic, "-m", "a,b,c")
    assert produced.returncode == 0, produced.stderr
    # -n 0 at 1 message a second: the signal lands during a pause or a wait for more
    reader = cli.background(
        "client", "--url", cli.node.url, "read", topic, "-m", "earliest", "-n", "0", "-r", "1"
    )
    reader.wait_for_line("content:a", stderr=False)
    assert reader.interrupt(signal.SIGTERM) == 0
    assert reader.err[-1].endswith("messages successfully read")
    assert not any("Traceback" in ln for ln in reader.err)
