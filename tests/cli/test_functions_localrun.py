"""``magnetar functions localrun`` as a user runs it: a real process against a real
standalone, fed and read with the official ``pulsar`` client, stopped with Ctrl+C."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import wait_until

from .conftest import Cli

SHOUT = """
from pulsar import Function

class Shout(Function):
    def process(self, input, context):
        return input.upper() + context.get_user_config_value("suffix")
"""


@pytest.mark.parametrize("runtime", ["process", "thread"])
def test_localrun_runs_instances_until_ctrl_c(cli: Cli, tmp_path: Path, runtime: str) -> None:
    package = tmp_path / "shout.py"
    package.write_text(SHOUT)
    tag = uuid.uuid4().hex[:8]
    src, out = f"lr-in-{tag}", f"lr-out-{tag}"
    run = cli.background(
        "functions", "localrun", "--py", str(package), "--classname", "shout.Shout",
        "--inputs", src, "--output", out, "--parallelism", "2", "--user-config", '{"suffix": "!"}',
        "--broker-service-url", cli.node.url, "--web-service-url", cli.node.http_url,
        "--runtime", runtime, "--work-dir", str(tmp_path / "work"),
    )  # fmt: skip
    run.wait_for_line("public/default/Shout:0: running", stderr=False, timeout_s=60)
    run.wait_for_line("public/default/Shout:1: running", stderr=False, timeout_s=60)
    client = pulsar.Client(cli.node.url)
    try:
        results = client.subscribe(out, "check")
        producer = client.create_producer(src)
        for word in ("a", "b", "c"):
            producer.send(word.encode())
        got = sorted(results.receive(10_000).data() for _ in range(3))
        assert got == [b"A!", b"B!", b"C!"]
    finally:
        client.close()
    assert run.interrupt(signal.SIGINT) == 0
    assert "public/default/Shout: stopped 2 instance(s)" in run.out
    assert not [ln for ln in run.err if "Traceback" in ln]


def test_localrun_bad_input_is_one_line_and_a_nonzero_exit(cli: Cli, tmp_path: Path) -> None:
    urls = ["--broker-service-url", cli.node.url, "--web-service-url", cli.node.http_url]
    missing = cli.run("functions", "localrun", "--py", str(tmp_path / "nope.py"),
                      "--classname", "nope.F", "--inputs", "x", *urls)  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"Error: package {tmp_path / 'nope.py'} does not exist"

    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('broken at import')\n")
    failing = cli.run("functions", "localrun", "--py", str(broken), "--classname", "broken.F",
                      "--inputs", "x", "--work-dir", str(tmp_path / "w"), *urls)  # fmt: skip
    assert failing.returncode == 1
    assert "Error: importing 'broken' failed: RuntimeError: broken at import" in failing.stderr
    assert "Traceback" not in failing.stderr

    no_inputs = cli.run("functions", "localrun", "--py", str(broken), "--classname", "broken.F",
                        *urls)  # fmt: skip
    assert no_inputs.returncode == 1
    assert no_inputs.stderr.strip() == (
        "Error: inputs: a function or sink needs inputs or topicsPattern"
    )

    bad_json = cli.run("functions", "localrun", "--py", str(broken), "--classname", "broken.F",
                       "--inputs", "x", "--user-config", "[1]", *urls)  # fmt: skip
    assert bad_json.returncode == 2
    assert "--user-config" in bad_json.stderr and "must be a JSON object" in bad_json.stderr


def test_ctrl_c_ends_localrun_while_a_thread_run_function_is_stuck(
    cli: Cli, tmp_path: Path
) -> None:
    package = tmp_path / "hang.py"
    package.write_text("import time\n\ndef hang(input):\n    time.sleep(3600)\n")
    src = f"hang-in-{uuid.uuid4().hex[:8]}"
    run = cli.background(
        "functions", "localrun", "--py", str(package), "--classname", "hang.hang",
        "--inputs", src, "--runtime", "thread",
        "--broker-service-url", cli.node.url, "--web-service-url", cli.node.http_url,
    )  # fmt: skip
    run.wait_for_line("public/default/hang:0: running", stderr=False, timeout_s=60)
    client = pulsar.Client(cli.node.url)
    try:
        client.create_producer(src).send(b"x")
    finally:
        client.close()
    # The function is in its call (the input was delivered) ...
    wait_until(
        lambda: (
            '"unackedMessages": 1'
            in cli.admin("topics", "stats", f"persistent://public/default/{src}").stdout
        ),
        what="the input delivered and not acknowledged",
    )
    # ... and Ctrl+C still ends the process: the stuck thread does not hold up its exit.
    assert run.interrupt(signal.SIGINT) == 0
