"""A function's state read and written from outside, as Pulsar's ``functions querystate`` and
``putstate`` (REST ``GET|POST /admin/v3/functions/{t}/{ns}/{name}/state/{key}``): the counters a
running function keeps are visible, a value put from outside round-trips and the function sees
it; a function's package can be downloaded. A real standalone with its Functions Worker."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.admin.rest import FormPart, encode_form
from magnetar.functions.errors import InvalidRequest
from magnetar.functions.state_rest import function_state_json, state_value_of
from magnetar.functions.state_store import StateEntry, StateStore
from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.processes import ELECTION_TIMEOUT_S, http

COUNTER = b"""\
class Count:
    def process(self, input, context):
        context.incr_counter("seen", 1)
        context.put_state("last", input)
        greeting = context.get_state("greeting")
        return (greeting.decode() if greeting else "-") + ":" + input
"""


def _admin(node: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _ok_json(node: StandaloneProcess, *args: str) -> Any:
    done = _admin(node, "--output", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _query(node: StandaloneProcess, key: str) -> Any:
    return _ok_json(node, "functions", "querystate", "--name", "count", "--key", key)


def _trigger(node: StandaloneProcess, value: str) -> str:
    done = _admin(node, "functions", "trigger", "--name", "count", "--trigger-value", value)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_querystate_and_putstate_against_a_running_function(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    node = standalone_factory()
    wait_until(
        lambda: http("GET", f"{node.http_url}/admin/v2/worker/cluster/leader")[0] == 200,
        ELECTION_TIMEOUT_S,
        what="the worker leads",
    )
    package = tmp_path / "counter.py"
    package.write_bytes(COUNTER)
    done = _admin(
        node, "functions", "create", "--name", "count", "--py", str(package),
        "--classname", "counter.Count", "--inputs", "count-in", "--output", "count-out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until(
        lambda: _ok_json(node, "functions", "status", "--name", "count")["numRunning"] == 1,
        ELECTION_TIMEOUT_S,
        what="the function runs",
    )

    # the counter and the value the function keeps, seen from outside
    assert [_trigger(node, v) for v in ("a", "b", "c")] == ["-:a", "-:b", "-:c"]
    wait_until(lambda: _query(node, "seen").get("numberValue") == 3, 30, what="counter at 3")
    seen = _query(node, "seen")
    assert set(seen) == {"key", "numberValue", "version"} and seen["key"] == "seen"
    assert _query(node, "last") == {"key": "last", "stringValue": "c", "version": 2}

    # querystate --watch keeps reading a key that is not there yet, until Ctrl+C
    watched, complaints = tmp_path / "watch.out", tmp_path / "watch.err"
    with watched.open("w") as out, complaints.open("w") as err:
        watch = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", node.http_url,
             "--output", "json", "functions", "querystate", "--name", "count", "--key",
             "greeting", "--watch"],
            stdout=out, stderr=err,
        )  # fmt: skip
    try:
        wait_until(
            lambda: "key 'greeting' doesn't exist." in complaints.read_text(), 30, what="404"
        )
        # putstate then querystate round-trips; the running function sees the value
        state = json.dumps({"key": "greeting", "stringValue": "hello"})
        done = _admin(node, "functions", "putstate", "--name", "count", "--state", state)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: '"stringValue":"hello"' in watched.read_text(), 30, what="watched")
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(30)
    assert "Traceback" not in complaints.read_text()

    assert _query(node, "greeting") == {"key": "greeting", "stringValue": "hello", "version": 0}
    assert _trigger(node, "d") == "hello:d"
    wait_until(lambda: _query(node, "seen").get("numberValue") == 4, 30, what="counter at 4")

    # bytes that are not UTF-8 travel as byteValue (base64), as Jackson writes a byte[]
    raw = base64.b64encode(b"\xff\x00\xfe").decode()
    done = _admin(node, "functions", "putstate", "--fqfn", "public/default/count",
                  "--state", json.dumps({"key": "bin", "byteValue": raw}))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _query(node, "bin") == {"key": "bin", "byteValue": raw, "version": 0}

    # the REST as pulsar-admin sends it: multipart part "state"
    base = f"{node.http_url}/admin/v3/functions/public/default/count/state"
    content_type, body = encode_form(
        [FormPart("state", json.dumps({"key": "k2", "stringValue": "v2"}).encode())]
    )
    assert http("POST", f"{base}/k2", body, content_type)[0] == 204
    assert http("GET", f"{base}/k2") == (200, {"key": "k2", "stringValue": "v2", "version": 0})

    # errors: one line, the server's reason, exit 1
    missing = _admin(node, "functions", "querystate", "--name", "count", "--key", "nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: key 'nope' doesn't exist. (HTTP 404)"
    unknown = _admin(node, "functions", "querystate", "--name", "ghost", "--key", "seen")
    assert unknown.returncode == 1 and "(HTTP 404)" in unknown.stderr
    counter = _admin(node, "functions", "putstate", "--name", "count",
                     "--state", '{"key": "seen", "numberValue": 7}')  # fmt: skip
    assert counter.returncode == 1
    assert "Setting Counter values not supported in put state (HTTP 400)" in counter.stderr
    other = json.dumps({"key": "b", "stringValue": "x"})
    assert http("POST", f"{base}/a", other.encode(), "application/json") == (
        400,
        {"reason": "Path key doesn't match key in json"},
    )

    # functions download: the package as uploaded
    target = tmp_path / "downloaded.py"
    done = _admin(
        node, "functions", "download", "--name", "count", "--destination-file", str(target)
    )
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == COUNTER


def test_lookup_answers_a_counter_before_a_value_and_counts_versions() -> None:
    writer, reader = StateStore(0), StateStore(-1)
    writer.put_state("k", b"v1")
    writer.put_state("k", b"v2")  # one call: the last write of a key wins in the batch
    for r in writer.take_writes():
        reader.apply(r.key, r.payload)
    writer.put_state("k", b"v3")
    for r in writer.take_writes():
        reader.apply(r.key, r.payload)
    assert reader.lookup("k") == StateEntry("k", None, b"v3", 1)
    writer.incr_counter("k", 5)
    for r in writer.take_writes():
        reader.apply(r.key, r.payload)
    assert reader.lookup("k") == StateEntry("k", 5, None, 2)
    assert reader.lookup("absent") is None


def test_function_state_bodies_as_pulsar_reads_and_writes_them() -> None:
    assert function_state_json(StateEntry("n", 3, None, 4)) == {
        "key": "n", "numberValue": 3, "version": 4,
    }  # fmt: skip
    assert state_value_of("k", {"key": "k", "stringValue": "s", "byteValue": "AA=="}) == b"s"
    assert state_value_of("k", {"byteValue": "/wA="}) == b"\xff\x00"
    assert state_value_of("k", {"byteValue": [255, 0]}) == b"\xff\x00"
    for bad in ({"key": "k", "numberValue": 1}, {"key": "other", "stringValue": "x"}, [1]):
        with pytest.raises(InvalidRequest):
            state_value_of("k", bad)
