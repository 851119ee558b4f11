"""``--config FILE`` of the server commands: Pulsar's keys, precedence flags > environment
(``MAGNETAR_<OPTION>``) > file > default, unknown keys named in one line, and the merged
result shown by ``admin brokers get-runtime-config``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar.auth.server_options import add_argparse_options
from magnetar.cli.server_config_file import (
    ConfigFileError,
    argparse_argv,
    default_map,
    parse_properties,
)
from magnetar.functions.__main__ import add_worker_arguments
from magnetar.testing import StandaloneProcess, wait_until

from .conftest import RUN_TIMEOUT_S

pytestmark = pytest.mark.timeout(120)


def test_properties_lines_comments_and_separators() -> None:
    text = "# comment\n! also a comment\n\n a = 1 \nb:two\nc=x=y\nempty=\na=3\n"
    assert parse_properties(text, "f.conf") == {"a": "3", "b": "two", "c": "x=y", "empty": ""}
    with pytest.raises(ConfigFileError, match=r"f\.conf:2: not key=value"):
        parse_properties("a=1\nnonsense\n", "f.conf")


def test_pulsar_keys_map_to_options_in_their_units() -> None:
    properties = {
        "webServicePort": "8081",
        "metadataStoreSessionTimeoutMillis": "4000",
        "managedLedgerMinLedgerRolloverTimeMinutes": "2",
        "superUserRoles": "",  # Pulsar's files list keys without values: the default stays
        "replicationProducerQueueSize": "1000",  # a key we have no option for
        "gcWaitTime": "900",  # bookkeeper.conf: not taken by a command without the option
    }
    accepted = {
        "http_port", "session_timeout_s", "managed_ledger_min_ledger_rollover_time_ms",
        "super_user_roles",
    }  # fmt: skip
    defaults, unknown = default_map(properties, accepted)
    assert defaults == {
        "http_port": "8081",
        "session_timeout_s": "4.0",
        "managed_ledger_min_ledger_rollover_time_ms": "120000",
    }
    assert unknown == ["replicationProducerQueueSize", "gcWaitTime"]


def _help(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args, "--help"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _default_of(help_text: str, option: str) -> str:
    lines = help_text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(option + " "))
    block = " ".join(lines[at : at + 4])
    return block.split("[default: ", 1)[1].split("]", 1)[0].split(";")[0]


def test_broker_and_bookie_read_their_files(tmp_path: Path) -> None:
    broker_conf = tmp_path / "broker.conf"
    broker_conf.write_text(
        "metadataStoreUrl=zk://127.0.0.1:2181/c\nbrokerMaxConnections=7\n"
        "managedLedgerDefaultEnsembleSize=3\nfancyFeature=on\n"
    )
    done = _help("broker", "--config", str(broker_conf))
    assert _default_of(done.stdout, "--broker-max-connections") == "7"
    assert _default_of(done.stdout, "--ensemble-size") == "3"
    assert done.stderr.strip().splitlines() == [
        f"magnetar broker: {broker_conf}: ignoring keys this command does not take: fancyFeature"
    ]
    # the file's metadataStoreUrl stands in for the required --metadata-url (and is checked)
    broker_conf.write_text("metadataStoreUrl=sqlite:///tmp/m.db\n")
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "broker", "--config", str(broker_conf)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 2 and "'sqlite:///tmp/m.db' is not a ZooKeeper URL" in done.stderr
    bookie_conf = tmp_path / "bookkeeper.conf"
    bookie_conf.write_text("bookiePort=3999\nzkTimeout=4000\n")
    done = _help("bookie", "--config", str(bookie_conf))
    assert _default_of(done.stdout, "--port") == "3999"
    assert _default_of(done.stdout, "--session-timeout-s") == "4.0"
    assert done.stderr == ""


def test_an_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "standalone", "--config",
         str(tmp_path / "missing.conf")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 2 and "cannot read" in done.stderr and "Traceback" not in done.stderr


def test_flags_beat_the_environment_which_beats_the_file(
    standalone_factory: Callable[..., StandaloneProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "brokerDeduplicationEnabled=true\n"  # file only
        "brokerMaxConnections=7\n"  # the environment says 9
        "activeConsumerFailoverDelayTimeMillis=55\n"  # the flag says 1234
        "managedLedgerMinLedgerRolloverTimeMinutes=2\n"
        "functionsWorkerEnabled=false\n"
    )
    monkeypatch.setenv("MAGNETAR_BROKER_MAX_CONNECTIONS", "9")
    node = standalone_factory("--config", str(conf), "--failover-delay-ms", "1234")
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
         "--output", "json", "brokers", "get-runtime-config"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True,
    )  # fmt: skip
    config = json.loads(done.stdout)
    assert config["brokerDeduplicationEnabled"] == "true"
    assert config["brokerMaxConnections"] == "9"
    assert config["activeConsumerFailoverDelayTimeMillis"] == "1234"
    assert config["managedLedgerMinLedgerRolloverTimeMinutes"] == "2.0"
    assert config["functionsWorkerEnabled"] == "false"
    assert config["webServicePort"] == str(node.http_port)


def _worker_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    add_worker_arguments(options)
    add_argparse_options(options)
    return options


def test_the_worker_file_and_environment_go_before_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "functions_worker.yml"
    conf.write_text(
        "workerId: w-file\nworkerPort: 6751\npulsarServiceUrl: pulsar://file:6650\n"
        "authenticationEnabled: true\nnumFunctionPackageReplicas: 1\n"
    )
    monkeypatch.setenv("MAGNETAR_PORT", "6752")
    options = _worker_options()
    argv = argparse_argv(options, ["--config", str(conf), "--service-url", "pulsar://flag:1"], "w")
    args = options.parse_args(argv)
    assert args.worker_id == "w-file"  # the file
    assert args.port == 6752  # the environment over the file
    assert args.service_url == "pulsar://flag:1"  # the flag over the file
    assert args.authentication_enabled is True


def test_a_worker_configured_by_file_joins(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    node = standalone_factory("--no-functions-worker")
    conf = tmp_path / "functions_worker.yml"
    conf.write_text(
        f"workerId: w-file\nworkerPort: 0\npulsarServiceUrl: {node.url}\n"
        f"pulsarWebServiceUrl: {node.http_url}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "functions-worker", "--config", str(conf),
         "--runtime", "thread", "--work-dir", str(tmp_path / "work")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = wait_until(proc.stdout.readline, 60, what="the worker's first line")
        assert first.startswith("joined w-file:"), first
    finally:
        proc.kill()
        proc.wait(10)
