"""The Functions Worker inside ``magnetar standalone`` (its REST API on the standalone's HTTP
port), driven through ``magnetar admin functions …`` and plain HTTP as pulsar-admin sends it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.cli.admin.rest import FormPart, encode_form
from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import ELECTION_TIMEOUT_S, http

FUNCTION = b"def process(input, context):\n    return input\n"


def _admin(node: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _ok_json(node: StandaloneProcess, *args: str) -> Any:
    done = _admin(node, "--output", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _worker_ready(node: StandaloneProcess) -> bool:
    status, body = http("GET", f"{node.http_url}/admin/v2/worker/cluster/leader")
    return status == 200 and body["workerId"] == "standalone"


ECHO = b"def echo(input):\n    return input + '!'\n"


@pytest.mark.parametrize("runtime", ["thread", "process"])
def test_create_run_status_stop_delete_through_the_cli(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path, runtime: str
) -> None:
    node = standalone_factory("--functions-runtime", runtime)
    wait_until(lambda: _worker_ready(node), ELECTION_TIMEOUT_S, what="the worker leads")
    package = tmp_path / "echo.py"
    package.write_bytes(ECHO)
    done = _admin(
        node, "functions", "create", "--tenant", "public", "--namespace", "default",
        "--name", "echo", "--py", str(package), "--classname", "echo.echo",
        "--inputs", "echo-in", "--output", "echo-out", "--parallelism", "2",
        "--processing-guarantees", "ATLEAST_ONCE", "--user-config", '{"k": "v"}',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Created echo successfully"
    assert _ok_json(node, "functions", "list") == ["echo"]
    got = _ok_json(node, "functions", "get", "--fqfn", "public/default/echo")
    assert got["className"] == "echo.echo" and got["parallelism"] == 2
    assert got["inputs"] == ["persistent://public/default/echo-in"]
    assert got["processingGuarantees"] == "ATLEAST_ONCE" and got["userConfig"] == {"k": "v"}
    assert got["py"] == "echo.py"

    def running(n: int) -> Any:
        status = _ok_json(node, "functions", "status", "--name", "echo")
        workers = {i["status"]["workerId"] for i in status["instances"]}
        ok = status["numInstances"] == 2 and status["numRunning"] == n and workers == {"standalone"}
        return status if ok else None

    wait_until(lambda: running(2), ELECTION_TIMEOUT_S, what="both instances running")
    # The package reached the worker's disk from the packages topic.
    fetched = list((node.data_dir / "functions" / "packages").glob("*/echo.py"))
    assert [p.read_bytes() for p in fetched] == [ECHO]

    # The instances process what is published, with the official client on both ends.
    client = pulsar.Client(node.url)
    try:
        consumer = client.subscribe("echo-out", "check")
        producer = client.create_producer("echo-in")
        sent = [f"m{i}" for i in range(10)]
        for text in sent:
            producer.send(text.encode())
        got_back = sorted(consumer.receive(30_000).data().decode() for _ in sent)
        assert got_back == sorted(f"{t}!" for t in sent)
    finally:
        client.close()
    wait_until(
        lambda: (
            _ok_json(node, "functions", "stats", "--name", "echo")["processedSuccessfullyTotal"]
            == 10
        ),
        ELECTION_TIMEOUT_S,
        what="stats count the ten messages",
    )

    assert _admin(node, "functions", "stop", "--name", "echo", "--instance-id", "1").returncode == 0
    wait_until(lambda: running(1), ELECTION_TIMEOUT_S, what="instance 1 stopped")
    one = _ok_json(node, "functions", "status", "--name", "echo", "--instance-id", "1")
    assert one["running"] is False and one["error"] == "" and one["workerId"] == "standalone"
    assert (
        _admin(node, "functions", "start", "--name", "echo", "--instance-id", "1").returncode == 0
    )
    wait_until(lambda: running(2), ELECTION_TIMEOUT_S, what="instance 1 started again")

    done = _admin(node, "functions", "delete", "--name", "echo")
    assert done.returncode == 0, done.stderr
    assert _ok_json(node, "functions", "list") == []
    done = _admin(node, "functions", "get", "--name", "echo")
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: Function echo doesn't exist (HTTP 404)"


def test_rest_as_pulsar_admin_sends_it_and_bad_requests(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    wait_until(lambda: _worker_ready(node), ELECTION_TIMEOUT_S, what="the worker leads")
    base = f"{node.http_url}/admin/v3"

    def post(path: str, parts: list[FormPart], method: str = "POST") -> tuple[int, Any]:
        content_type, body = encode_form(parts)
        return http(method, f"{base}/{path}", body, content_type)

    def definition(config: bytes, package: bytes | None = FUNCTION) -> list[FormPart]:
        parts = [FormPart("functionConfig", config)]
        if package is not None:
            parts.append(FormPart("data", package, "application/octet-stream", "f.py"))
        return parts

    good = b'{"inputs": ["in"], "className": "f.process"}'
    assert post("functions/public/default/f", definition(good)) == (204, None)
    assert http("GET", f"{base}/functions/public/default") == (200, ["f"])
    status, body = http("GET", f"{base}/functions/public/default/f/status")
    assert status == 200 and body["numInstances"] == 1
    # update: new parallelism, the package kept
    update = b'{"inputs": ["in"], "className": "f.process", "parallelism": 3}'
    assert post("functions/public/default/f", definition(update, None), "PUT") == (204, None)
    status, body = http("GET", f"{base}/functions/public/default/f")
    assert (status, body["parallelism"], body["py"]) == (200, 3, "f.py")

    for path, parts, expected, words in (
        ("functions/public/default/f", definition(good), 409, "already exists"),
        ("functions/public/default/g", definition(b"{bad json"), 400, "not valid JSON"),
        ("functions/public/default/g", definition(good, None), 400, "package is not provided"),
        ("functions/no-tenant/default/g", definition(good), 400, "Tenant no-tenant does not exist"),
        ("functions/public/no-ns/g", definition(good), 400, "Namespace public/no-ns does not exist"),
        ("functions/public/default/g", definition(b'{"parallelism": 2}'), 400, "inputs"),
        ("functions/public/default/g", definition(b'{"inputs": ["i"], "parallelism": 0}'), 400,
         "parallelism must be 1..1024"),
        ("functions/public/default/g", definition(b'{"inputs": ["in"], "tenant": "x"}'), 400, "differs"),
    ):  # fmt: skip
        status, body = post(path, parts)
        assert status == expected and words in body["reason"], (path, status, body)
    for method, path, expected, words in (
        ("GET", "functions/public/default/nope", 404, "Function nope doesn't exist"),
        ("GET", "sinks/public/default/f", 404, "Sink f doesn't exist"),
        ("GET", "functions/public/default/f/9/status", 404, "no instance 9"),
        ("POST", "functions/public/default/nope/stop", 404, "doesn't exist"),
        ("GET", "functions/public/default/f/x/status", 400, "not a number"),
        ("DELETE", "functions/public/default/nope", 404, "doesn't exist"),
    ):
        status, body = http(method, f"{base}/{path}")
        assert status == expected and words in body["reason"], (path, status, body)
    status, body = http("POST", f"{base}/functions/public/default/h", b"[1, 2", "application/json")
    assert status == 400 and "not valid JSON" in body["reason"]
    # every bad request was answered, and the process serves on
    assert http("DELETE", f"{base}/functions/public/default/f") == (204, None)
    assert node.proc is not None and node.proc.poll() is None
    assert "Traceback" not in node.log_path.read_text()


def test_no_functions_worker(standalone_factory: Callable[..., StandaloneProcess]) -> None:
    node = standalone_factory("--no-functions-worker")
    status, _ = http("GET", f"{node.http_url}/admin/v3/functions/public/default")
    assert status == 404
    status, _ = http("GET", f"{node.http_url}/admin/v2/worker/cluster/leader")
    assert status == 404


def test_sources_and_sinks_through_the_cli(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    node = standalone_factory()
    wait_until(lambda: _worker_ready(node), ELECTION_TIMEOUT_S, what="the worker leads")
    done = _admin(
        node, "sources", "create", "--name", "gen", "--source-type", "datagen",
        "--destination-topic-name", "generated", "--source-config", '{"rate": 5}',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = _admin(node, "sinks", "create", "--name", "hook", "--sink-type", "webhook",
                  "--inputs", "generated")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _ok_json(node, "sources", "list") == ["gen"]
    assert _ok_json(node, "sinks", "list") == ["hook"]
    assert _ok_json(node, "functions", "list") == []
    source = _ok_json(node, "sources", "get", "--name", "gen")
    assert source["componentType"] == "SOURCE" and source["className"] == "datagen"
    assert source["output"] == "persistent://public/default/generated"
    assert source["userConfig"] == {"rate": 5}
    # a source needs somewhere to write
    done = _admin(node, "sources", "create", "--name", "nowhere", "--source-type", "datagen")
    assert done.returncode == 1 and "output" in done.stderr
    wait_until(
        lambda: _ok_json(node, "sinks", "status", "--name", "hook")["numInstances"] == 1,
        ELECTION_TIMEOUT_S,
    )
    assert _admin(node, "sinks", "delete", "--name", "hook").returncode == 0
    assert _admin(node, "sources", "delete", "--name", "gen").returncode == 0
    assert _ok_json(node, "sources", "list") == [] and _ok_json(node, "sinks", "list") == []


def test_trigger_returns_the_functions_output(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    node = standalone_factory()
    wait_until(lambda: _worker_ready(node), ELECTION_TIMEOUT_S, what="the worker leads")
    package = tmp_path / "shout.py"
    package.write_bytes(b"def shout(input):\n    return input.upper() + '!'\n")
    done = _admin(
        node, "functions", "create", "--name", "shout", "--py", str(package),
        "--classname", "shout.shout", "--inputs", "shout-in", "--output", "shout-out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: _ok_json(node, "functions", "status", "--name", "shout")["numRunning"] == 1,
        ELECTION_TIMEOUT_S,
    )
    done = _admin(node, "functions", "trigger", "--name", "shout", "--trigger-value", "hello")
    assert (done.returncode, done.stdout.strip()) == (0, "HELLO!"), done.stderr
    value = tmp_path / "value"
    value.write_bytes(b"from a file")
    done = _admin(node, "functions", "trigger", "--name", "shout", "--trigger-file", str(value),
                  "--topic", "shout-in")  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "FROM A FILE!"), done.stderr
    done = _admin(node, "functions", "trigger", "--name", "shout", "--trigger-value", "x",
                  "--topic", "elsewhere")  # fmt: skip
    assert done.returncode == 1
    assert (
        "persistent://public/default/elsewhere is not an input of shout (HTTP 400)" in done.stderr
    )


def test_update_with_a_new_package_restarts_the_instances_on_it(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    node = standalone_factory()
    wait_until(lambda: _worker_ready(node), ELECTION_TIMEOUT_S, what="the worker leads")
    first, second = tmp_path / "v1", tmp_path / "v2"
    first.mkdir()
    second.mkdir()
    (first / "tag.py").write_bytes(b"def tag(input):\n    return 'v1 ' + input\n")
    (second / "tag.py").write_bytes(b"def tag(input):\n    return 'v2 ' + input\n")
    common = ("--name", "tag", "--classname", "tag.tag", "--inputs", "tag-in",
              "--output", "tag-out")  # fmt: skip
    done = _admin(node, "functions", "create", *common, "--py", str(first / "tag.py"))
    assert done.returncode == 0, done.stderr

    def trigger() -> str:
        done = _admin(node, "functions", "trigger", "--name", "tag", "--trigger-value", "x")
        return done.stdout.strip() if done.returncode == 0 else done.stderr

    wait_until(lambda: trigger() == "v1 x", ELECTION_TIMEOUT_S, what="v1 answers")
    done = _admin(node, "functions", "update", *common, "--py", str(second / "tag.py"),
                  "--parallelism", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until(lambda: trigger() == "v2 x", ELECTION_TIMEOUT_S, what="v2 answers")
    status = wait_until(
        lambda: (
            (s := _ok_json(node, "functions", "status", "--name", "tag"))["numRunning"] == 2 and s
        ),
        ELECTION_TIMEOUT_S,
    )
    assert status["numInstances"] == 2
    assert _ok_json(node, "functions", "get", "--name", "tag")["parallelism"] == 2
