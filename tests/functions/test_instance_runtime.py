"""Function instances against a real ``magnetar standalone``, fed and read with the official
``pulsar`` client: the Function API (``pulsar.Function`` subclasses and plain functions),
the Context, durable state, the processing guarantees, packages, and bad input."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.functions.context import sequence_id_of
from magnetar.functions.function_config import ProcessingGuarantee
from magnetar.functions.process_runtime import ProcessRuntime
from magnetar.functions.thread_runtime import ThreadRuntime
from magnetar.testing import StandaloneProcess, wait_until

from .fn_helpers import (
    RECEIVE_TIMEOUT_MS,
    build_wheel,
    drain,
    make_spec,
    read_state,
    state_record,
    write,
    zip_dir,
)
from .runtime_host import Runtime, RuntimeHost, runtime_host

START_TIMEOUT_S = 60.0
"""Starting an instance: a virtualenv and a pip run for packages with requirements."""

WORD_COUNT = """
from pulsar import Function

class WordCount(Function):
    def process(self, input, context):
        words = input.split()
        for word in words:
            context.incr_counter(word, 1)
        context.put_state("last-sentence", input)
        context.record_metric("words", len(words))
        context.get_logger().info("counted %d words", len(words))
        return ",".join(f"{w}={context.get_counter(w)}" for w in words)

class Report(Function):
    def process(self, input, context):
        last = context.get_state("last-sentence")
        return f"{input}={context.get_counter(input)} last={last.decode()}"
"""

COUNT_AND_ECHO = """
import time

def echo(input):
    return input

class CountAndEcho:
    def process(self, input, context):
        context.incr_counter("n", 1)
        delay_ms = context.get_user_config_value("delay_ms") or 0
        time.sleep(delay_ms / 1000)
        return input
"""


@pytest.fixture
def host() -> Iterator[RuntimeHost]:
    with runtime_host() as h:
        yield h


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url)
    try:
        yield c
    finally:
        c.close()


def wait_running(host: RuntimeHost, runtime: Runtime) -> None:
    def running() -> bool:
        status = host.status(runtime)
        assert not (status.error and runtime.failed_permanently), status.error
        return status.running

    wait_until(running, timeout_s=START_TIMEOUT_S, what="instance running")


def test_word_count_state_is_durable_and_seen_by_another_instance(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    package = write(tmp_path / "wordcount.py", WORD_COUNT)
    name, src, out = f"wc-{unique}", f"wc-in-{unique}", f"wc-out-{unique}"
    logs = client.subscribe(f"wc-log-{unique}", "check")
    counting = host.start(
        ThreadRuntime(),
        make_spec(standalone, tmp_path, package, "wordcount.WordCount", name=name,
                  inputs=(src,), output=out, log_topic=f"wc-log-{unique}"),
    )  # fmt: skip
    wait_running(host, counting)
    consumer = client.subscribe(out, "check")
    producer = client.create_producer(src)
    producer.send(b"a b a")
    producer.send(b"b c")
    assert [m.data() for m in drain(consumer, 2)] == [b"a=2,b=1,a=2", b"b=2,c=1"]
    status = host.status(counting)
    assert (status.num_received, status.num_successfully_processed) == (2, 2)
    logged = drain(logs, 2)
    lines = [m.data().decode() for m in logged]
    assert [ln.split(" INFO ", 1)[1] for ln in lines] == ["counted 3 words", "counted 2 words"]
    assert logged[0].properties() == {"loglevel": "INFO", "instance": "0",
                                      "fqfn": f"public/default/{name}"}  # fmt: skip
    host.stop(counting)

    # A new instance (another id, as after rescheduling) reads the state from the cluster.
    reporting = host.start(
        ThreadRuntime(),
        make_spec(standalone, tmp_path, package, "wordcount.Report", name=name,
                  inputs=(src,), output=out, instance_id=1),
    )  # fmt: skip
    wait_running(host, reporting)
    producer.send(b"a")
    producer.send(b"b")
    assert [m.data() for m in drain(consumer, 2)] == [b"a=2 last=b c", b"b=2 last=b c"]
    state = read_state(client, name)
    assert (state.get_counter("a"), state.get_counter("c")) == (2, 1)


def test_context_api_and_plain_function(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    side = f"side-{unique}"
    probe = write(
        tmp_path / "probe.py",
        textwrap.dedent(f"""
        import json
        import pulsar

        class Probe(pulsar.Function):
            def process(self, input, context):
                context.publish("{side}", "side:" + input, properties={{"p": "1"}})
                return json.dumps({{
                    "input": input,
                    "key": context.get_message_key(),
                    "properties": context.get_message_properties(),
                    "topic": context.get_current_message_topic_name(),
                    "inputs": context.get_input_topics(),
                    "output": context.get_output_topic(),
                    "name": [context.get_function_tenant(), context.get_function_namespace(),
                             context.get_function_name(), context.get_function_id()],
                    "instance": context.get_instance_id(),
                    "user": [context.get_user_config_value("greeting"),
                             context.get_user_config_map()],
                    "secret": context.get_secret("password"),
                    "has_id": context.get_message_id() is not None,
                }})
        """),
    )
    name, src, out = f"probe-{unique}", f"probe-in-{unique}", f"probe-out-{unique}"
    runtime = host.start(
        ThreadRuntime(),
        make_spec(standalone, tmp_path, probe, "probe.Probe", name=name, inputs=(src,),
                  output=out, user_config={"greeting": "hi"}, secrets={"password": "s3cret"}),
    )  # fmt: skip
    wait_running(host, runtime)
    results = client.subscribe(out, "check")
    side_messages = client.subscribe(side, "check")
    client.create_producer(src).send(b"hello", partition_key="k1", properties={"a": "b"})
    seen = json.loads(drain(results, 1)[0].data())
    assert seen == {
        "input": "hello",
        "key": "k1",
        "properties": {"a": "b"},
        "topic": f"persistent://public/default/{src}",
        "inputs": [f"persistent://public/default/{src}"],
        "output": f"persistent://public/default/{out}",
        "name": ["public", "default", name, f"public/default/{name}"],
        "instance": 0,
        "user": ["hi", {"greeting": "hi"}],
        "secret": "s3cret",
        "has_id": True,
    }
    side_msg = drain(side_messages, 1)[0]
    assert (side_msg.data(), side_msg.properties()) == (b"side:hello", {"p": "1"})

    # A plain one-argument function, at-most-once.
    echo = write(tmp_path / "echo_fn.py", COUNT_AND_ECHO)
    src2, out2 = f"echo-in-{unique}", f"echo-out-{unique}"
    plain = host.start(
        ThreadRuntime(),
        make_spec(standalone, tmp_path, echo, "echo_fn.echo", name=f"echo-{unique}",
                  inputs=(src2,), output=out2, guarantee=ProcessingGuarantee.AT_MOST_ONCE),
    )  # fmt: skip
    wait_running(host, plain)
    echoed = client.subscribe(out2, "check")
    client.create_producer(src2).send("grüße".encode())
    assert drain(echoed, 1)[0].data() == "grüße".encode()


def test_effectively_once_after_a_crash_between_result_state_and_ack(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    """The two windows a crash can leave open, set up as a crashed instance leaves them:
    (1) the result stored, the state and the ack not; (2) result and state stored, the ack
    not. A restarted instance must publish each result once and count each input once."""
    package = write(tmp_path / "count_fn.py", COUNT_AND_ECHO)
    name, src, out = f"eo-{unique}", f"eo-in-{unique}", f"eo-out-{unique}"
    full_src = f"persistent://public/default/{src}"
    spec = make_spec(standalone, tmp_path, package, "count_fn.CountAndEcho", name=name,
                     inputs=(src,), output=out, guarantee=ProcessingGuarantee.EFFECTIVELY_ONCE)  # fmt: skip
    results = client.subscribe(out, "check")
    inputs = client.create_producer(src)
    first = host.start(ThreadRuntime(), spec)
    wait_running(host, first)
    inputs.send(b"m1")
    assert [m.data() for m in drain(results, 1)] == [b"m1"]
    host.stop(first)

    # The instance's producer for this input, as a crashed instance had it.
    crashed_name = f"public/default/{name}/{full_src}"
    crashed = client.create_producer(out, producer_name=crashed_name)
    m2 = inputs.send(b"m2")
    crashed.send(b"m2", sequence_id=sequence_id_of(m2))  # window (1)
    crashed.close()
    second = host.start(ThreadRuntime(), spec)
    wait_running(host, second)
    assert [m.data() for m in drain(results, 1)] == [b"m2"]
    wait_until(lambda: host.status(second).num_successfully_processed == 1, what="m2 processed")
    assert read_state(client, name).get_counter("n") == 2
    host.stop(second)

    crashed = client.create_producer(out, producer_name=crashed_name)
    m3 = inputs.send(b"m3")
    crashed.send(b"m3", sequence_id=sequence_id_of(m3))  # window (2): result and state
    position = [m3.ledger_id(), m3.entry_id(), m3.batch_index()]
    state_record(client, name, {"c/n/0": {"c": 3}, f"p/{full_src}": {"p": position}})
    crashed.close()
    third = host.start(ThreadRuntime(), spec)
    wait_running(host, third)
    inputs.send(b"m4")
    assert [m.data() for m in drain(results, 2)] == [b"m3", b"m4"]
    assert read_state(client, name).get_counter("n") == 4
    # m4 processed; m3 received and skipped as done.
    wait_until(
        lambda: (
            (host.status(third).num_received, host.status(third).num_successfully_processed)
            == (2, 1)
        ),
        what=f"m4 processed and m3 skipped: {host.status(third)}",
    )


def test_effectively_once_across_sigkill_of_the_instance_process(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    total = 300
    package = write(tmp_path / "count_fn.py", COUNT_AND_ECHO)
    name, src, out = f"kill-{unique}", f"kill-in-{unique}", f"kill-out-{unique}"
    runtimes = [
        host.start(
            ProcessRuntime(),
            make_spec(standalone, tmp_path, package, "count_fn.CountAndEcho", name=name,
                      inputs=(src,), output=out, instance_id=i, parallelism=2,
                      user_config={"delay_ms": 5},
                      guarantee=ProcessingGuarantee.EFFECTIVELY_ONCE),
        )
        for i in range(2)
    ]  # fmt: skip
    for runtime in runtimes:
        wait_running(host, runtime)
    results = client.subscribe(out, "check")
    producer = client.create_producer(src, batching_enabled=True)
    for i in range(total):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    seen = [results.receive(RECEIVE_TIMEOUT_MS) for _ in range(total // 5)]
    active = wait_until(
        lambda: next((r for r in runtimes if host.status(r).num_received > 0), None),
        what="an active instance",
    )
    assert isinstance(active, ProcessRuntime) and active.pid is not None
    os.kill(active.pid, signal.SIGKILL)
    seen += drain(results, total - len(seen))
    counts = Counter(m.data() for m in seen)
    assert sorted(counts) == sorted(f"{i}".encode() for i in range(total))
    assert [v for v, n in counts.items() if n > 1] == []
    assert read_state(client, name).get_counter("n") == total
    wait_until(lambda: host.status(active).num_restarts >= 1, what="the killed instance restarted")
    status = host.status(active)
    assert status.error == "instance process killed by signal 9" or status.running


def test_pulsar_function_with_a_requirements_dependency_in_its_own_virtualenv(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    with pytest.raises(ImportError):
        __import__("magnetar_tinydep")
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "magnetar_tinydep", "1.0", "def decorate(s):\n    return f'<{s}>'\n")
    source = tmp_path / "src" / "decorator"
    write(
        source / "requirements.txt", f"--no-index\n--find-links {wheels}\nmagnetar_tinydep==1.0\n"
    )
    write(source / "decorate_fn.py", textwrap.dedent("""
        from pulsar import Function
        import magnetar_tinydep

        class Decorate(Function):
            def process(self, input, context):
                return magnetar_tinydep.decorate(input)
    """))  # fmt: skip
    package = zip_dir(source, tmp_path / "decorator.zip")
    name, src, out = f"dep-{unique}", f"dep-in-{unique}", f"dep-out-{unique}"
    runtime = host.start(
        ProcessRuntime(),
        make_spec(standalone, tmp_path, package, "decorate_fn.Decorate", name=name,
                  inputs=(src,), output=out),
    )  # fmt: skip
    wait_running(host, runtime)
    results = client.subscribe(out, "check")
    client.create_producer(src).send(b"x")
    assert drain(results, 1)[0].data() == b"<x>"


def test_bad_input_shows_in_status_and_the_runtime_keeps_running(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    def start(kind: type[Runtime], package: Path | None, class_name: str, tag: str,
              **config: object) -> Runtime:  # fmt: skip
        spec = make_spec(standalone, tmp_path, package, class_name, name=f"{tag}-{unique}",
                         inputs=config.pop("inputs", (f"{tag}-in-{unique}",)),  # type: ignore[arg-type]
                         output=f"{tag}-out-{unique}", **config)  # fmt: skip
        return host.start(kind(), spec)

    def error_of(runtime: Runtime) -> str:
        return wait_until(lambda: host.status(runtime).error, timeout_s=START_TIMEOUT_S,
                          what="an error in status")  # fmt: skip

    broken = write(tmp_path / "broken_fn.py", "import no_such_module_here\n")
    not_zip = tmp_path / "not-a.zip"
    not_zip.write_bytes(b"this is not a zip")
    escape = tmp_path / "escape.zip"
    import zipfile

    with zipfile.ZipFile(escape, "w") as zf:
        zf.writestr("../outside.py", "x = 1\n")
    bad_requirements = tmp_path / "badreq"
    write(bad_requirements / "requirements.txt", "--no-index\nmagnetar-no-such-package==9.9\n")
    write(bad_requirements / "fn.py", "def f(x):\n    return x\n")
    echo = write(tmp_path / "echo_fn.py", COUNT_AND_ECHO)

    cases = {
        "import": (start(ProcessRuntime, broken, "broken_fn.F", "import"),
                   "importing 'broken_fn' failed: ModuleNotFoundError"),
        "class": (start(ThreadRuntime, echo, "echo_fn.Missing", "class"),
                  "module has no 'Missing'"),
        "zip": (start(ThreadRuntime, not_zip, "x.F", "zip"), "not-a.zip is not a readable zip"),
        "escape": (start(ThreadRuntime, escape, "x.F", "escape"), "is outside the package"),
        "install": (start(ProcessRuntime, bad_requirements, "fn.f", "install"),
                    "installing the requirements failed"),
        "missing": (start(ThreadRuntime, tmp_path / "nope.py", "nope.F", "missing"),
                    "does not exist"),
        "namespace": (start(ThreadRuntime, echo, "echo_fn.echo", "ns",
                            inputs=(f"persistent://public/no-such-ns-{unique}/in",)),
                      "no-such-ns"),
    }  # fmt: skip
    for what, (runtime, expected) in cases.items():
        error = error_of(runtime)
        assert expected in error, (what, error)
        assert not host.status(runtime).running, what
    wait_until(lambda: host.status(cases["namespace"][0]).num_restarts >= 1,
               what="an instance whose input cannot be subscribed is retried")  # fmt: skip
    assert not cases["namespace"][0].failed_permanently

    # A function that raises: counted, the input negatively acknowledged and, after
    # maxMessageRetries, sent to the dead-letter topic; other inputs still processed.
    raising = write(tmp_path / "raising_fn.py", textwrap.dedent("""
        import sys

        def maybe_fail(input):
            if input == "bad":
                raise ValueError("refusing " + input)
            if input == "exit":
                sys.exit(3)
            return input
    """))  # fmt: skip
    dlq = f"raise-dlq-{unique}"
    runtime = start(ThreadRuntime, raising, "raising_fn.maybe_fail", "raise",
                    max_message_retries=1, dead_letter_topic=dlq)  # fmt: skip
    wait_running(host, runtime)
    dead = client.subscribe(dlq, "check", initial_position=pulsar.InitialPosition.Earliest)
    results = client.subscribe(f"raise-out-{unique}", "check")
    producer = client.create_producer(f"raise-in-{unique}")
    producer.send(b"bad")
    producer.send(b"exit")
    producer.send(b"good")
    assert drain(results, 1)[0].data() == b"good"
    dead_letters = sorted(dead.receive(RECEIVE_TIMEOUT_MS * 3).data() for _ in range(2))
    assert dead_letters == [b"bad", b"exit"]
    status = host.status(runtime)
    assert status.running and status.num_user_exceptions == 4  # each tried twice
    assert {e.message for e in status.latest_user_exceptions} == {
        "ValueError: refusing bad",
        "FunctionExited: the function called sys.exit(3)",
    }


def test_stopping_a_process_instance_stuck_in_the_function_exits_cleanly(
    standalone: StandaloneProcess, client: pulsar.Client, host: RuntimeHost, tmp_path: Path,
    unique: str,
) -> None:  # fmt: skip
    package = write(
        tmp_path / "hang_fn.py", "import time\n\ndef hang(input):\n    time.sleep(3600)\n"
    )
    name, src = f"hang-{unique}", f"hang-in-{unique}"
    runtime = host.start(
        ProcessRuntime(),
        make_spec(standalone, tmp_path, package, "hang_fn.hang", name=name, inputs=(src,)),
    )
    wait_running(host, runtime)
    client.create_producer(src).send(b"x")
    wait_until(lambda: host.status(runtime).num_received == 1, what="the input received")
    assert isinstance(runtime, ProcessRuntime)
    pid = runtime.pid
    assert pid is not None
    host.stop(runtime)
    # SIGTERM ended it (exit 0), without waiting for the SIGKILL that follows the bound.
    assert runtime.exit_code == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
