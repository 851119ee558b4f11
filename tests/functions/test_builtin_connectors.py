"""Built-in sources and sinks (``builtin://NAME``, ``--source-type``/``--sink-type``), deployed
with ``magnetar admin sources|sinks create`` on a real worker process (process runtime)
against a real ``magnetar standalone``, read and fed with the official ``pulsar`` client: the
data generator, the file source (a restart does not send a finished file again), the
webhook sink (retries a failing receiver), the PostgreSQL sink (a real PostgreSQL; upserts
by key), and bad settings shown in status while the worker keeps running."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pulsar
import pytest

from magnetar.testing import StandaloneProcess, wait_until
from tests.functions.fn_helpers import QUIET_MS, RECEIVE_TIMEOUT_MS
from tests.functions.postgres_server import PostgresServer
from tests.functions.processes import ELECTION_TIMEOUT_S, WorkerProcess, cluster_topics

RUNNING_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def worker(
    standalone: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(
        standalone,
        tmp_path_factory.mktemp("connectors"),
        "cw",
        *cluster_topics(f"connectors-{uuid.uuid4().hex[:8]}"),
        "--runtime", "process",
    )  # fmt: skip
    try:
        wait_until(proc.joined, ELECTION_TIMEOUT_S, what="the worker joined")
        wait_until(proc.leading, ELECTION_TIMEOUT_S, what="the worker leads")
        yield proc
    finally:
        proc.proc.kill()
        proc.proc.wait(10)


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url)
    try:
        yield c
    finally:
        c.close()


def admin(worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", worker.http_url,
         *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def status(worker: WorkerProcess, kinds: str, name: str) -> Any:
    done = admin(worker, "--output", "json", kinds, "status", "--name", name)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def processed(worker: WorkerProcess, kinds: str, name: str) -> int:
    """The first instance's ``numSuccessfullyProcessed`` as its status reports it now."""
    return int(status(worker, kinds, name)["instances"][0]["status"]["numSuccessfullyProcessed"])


def running(worker: WorkerProcess, kinds: str, name: str, instances: int = 1) -> bool:
    return bool(status(worker, kinds, name)["numRunning"] == instances)


def receive_all(consumer: pulsar.Consumer, expected: int) -> list[pulsar.Message]:
    """``expected`` messages, then whatever else comes before the topic stays quiet."""
    out = []
    while len(out) < expected:
        msg = consumer.receive(RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(msg)
        out.append(msg)
    while True:
        try:
            msg = consumer.receive(QUIET_MS)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(msg)
        out.append(msg)


def test_datagen_source_makes_records_at_its_rate(
    worker: WorkerProcess, client: pulsar.Client, unique: str
) -> None:
    out = f"datagen-{unique}"
    consumer = client.subscribe(out, "check", initial_position=pulsar.InitialPosition.Earliest)
    done = admin(
        worker, "sources", "create", "--name", f"gen-{unique}", "--source-type", "datagen",
        "--destination-topic-name", out,
        "--source-config", json.dumps({"ratePerSecond": 200, "count": 30}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(m.data()) for m in receive_all(consumer, 30)]
    assert [r["sequence"] for r in records] == list(range(30))
    assert all(r["instance"] == 0 and 18 <= r["age"] <= 99 for r in records)
    got = status(worker, "sources", f"gen-{unique}")
    assert got["numRunning"] == 1
    assert got["instances"][0]["status"]["numReceived"] == 30
    # Every stored record is counted, the last one too (the source is idle after it).
    wait_until(
        lambda: (
            status(worker, "sources", f"gen-{unique}")["instances"][0]["status"][
                "numSuccessfullyProcessed"
            ]
            == 30
        ),
        10,
        what="30 records counted as stored",
    )


def test_file_source_sends_each_line_once_across_a_restart(
    worker: WorkerProcess, client: pulsar.Client, unique: str, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text("alpha\nbeta\n\ngamma\n")
    out = f"files-{unique}"
    name = f"files-{unique}"
    consumer = client.subscribe(out, "check", initial_position=pulsar.InitialPosition.Earliest)
    done = admin(
        worker, "sources", "create", "--name", name, "--archive", "builtin://file",
        "--destination-topic-name", out,
        "--source-config", json.dumps({"inputDirectory": str(inbox), "pollingIntervalMs": 100}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = receive_all(consumer, 3)
    assert [m.data() for m in first] == [b"alpha", b"beta", b"gamma"]
    assert first[0].properties() == {"file": "a.txt"}
    wait_until(lambda: (inbox / "a.txt.processed").exists(), 10, what="a.txt marked processed")

    # A restarted instance does not send the finished file again; new files are read.
    assert admin(worker, "sources", "restart", "--name", name).returncode == 0
    wait_until(lambda: running(worker, "sources", name), RUNNING_TIMEOUT_S, what="restarted")
    (inbox / ".b.tmp").write_text("delta\nepsilon")  # written under a skipped name ...
    (inbox / ".b.tmp").rename(inbox / "b.txt")  # ... and renamed when complete
    assert [m.data() for m in receive_all(consumer, 2)] == [b"delta", b"epsilon"]
    wait_until(lambda: (inbox / "b.txt.processed").exists(), 10, what="b.txt marked processed")


class _Receiver(BaseHTTPRequestHandler):
    """Answers 503 to the first ``failures`` requests, then 200, recording what came."""

    failures: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()
    received: ClassVar[list[tuple[bytes, dict[str, str]]]] = []
    attempts: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            type(self).attempts += 1
            fail = type(self).attempts <= type(self).failures
            if not fail:
                self.received.append((body, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(503 if fail else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_webhook_sink_posts_every_message_retrying_a_failing_receiver(
    worker: WorkerProcess, client: pulsar.Client, unique: str
) -> None:
    _Receiver.failures, _Receiver.attempts, _Receiver.received = 3, 0, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        inputs = f"hook-in-{unique}"
        name = f"hook-{unique}"
        done = admin(
            worker, "sinks", "create", "--name", name, "--sink-type", "webhook",
            "--inputs", inputs,
            "--sink-config", json.dumps({"url": url, "retryBackoffMs": 20,
                                         "contentType": "text/plain"}),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        wait_until(lambda: running(worker, "sinks", name), RUNNING_TIMEOUT_S, what="running")
        producer = client.create_producer(inputs)
        for i in range(5):
            producer.send(f"event-{i}".encode(), properties={"n": str(i)})
        producer.close()
        wait_until(lambda: len(_Receiver.received) >= 5, 30, what="five deliveries")
        bodies = [body for body, _ in _Receiver.received]
        assert sorted(bodies) == [f"event-{i}".encode() for i in range(5)]
        for body, headers in _Receiver.received:
            assert headers["content-type"] == "text/plain"  # (HTTP header names: any case)
            assert headers["x-pulsar-property-n"] == body.decode().rsplit("-", 1)[1]
            assert headers["x-pulsar-topic"].endswith(inputs)
        assert _Receiver.attempts == 5 + 3  # the three 503s were retried
        wait_until(
            lambda: processed(worker, "sinks", name) == 5,
            10,
            what="five processed",
        )
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_postgres_sink_inserts_rows_and_upserts_by_key(
    worker: WorkerProcess, client: pulsar.Client, postgres: PostgresServer, unique: str
) -> None:
    table = f"people_{unique.replace('-', '_')}"
    with psycopg.connect(postgres.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, full_name text, age int)")
    inputs = f"pg-in-{unique}"
    name = f"pg-{unique}"
    config = {
        "connection": postgres.conninfo,
        "tableName": table,
        "columns": {"id": "id", "full_name": "name", "age": "age"},
        "key": "id",
    }
    done = admin(
        worker, "sinks", "create", "--name", name, "--sink-type", "postgres",
        "--inputs", inputs, "--sink-config", json.dumps(config),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wait_until(lambda: running(worker, "sinks", name), RUNNING_TIMEOUT_S, what="running")
    producer = client.create_producer(inputs)
    docs = [
        {"id": 1, "name": "Ada", "age": 36},
        {"id": 2, "name": "Grace", "age": 85},
        {"id": 1, "name": "Ada", "age": 37},  # the same key again: an update, not a row
        {"id": 3, "name": "Edsger", "ignored": True},
    ]
    for doc in docs:
        producer.send(json.dumps(doc).encode())
    producer.close()

    def rows() -> list[tuple[Any, ...]]:
        with psycopg.connect(postgres.conninfo) as conn:
            return conn.execute(f"SELECT id, full_name, age FROM {table} ORDER BY id").fetchall()

    expected = [(1, "Ada", 37), (2, "Grace", 85), (3, "Edsger", None)]
    wait_until(lambda: rows() == expected, 30, what=f"rows {expected}")
    # The instance writes its status every 250 ms: the count can lag the rows by that much.
    wait_until(
        lambda: processed(worker, "sinks", name) == 4, 10, what="four processed in the status"
    )
    assert status(worker, "sinks", name)["instances"][0]["status"]["numUserExceptions"] == 0


def test_bad_settings_show_in_status_and_the_worker_keeps_running(
    worker: WorkerProcess, unique: str
) -> None:
    name = f"bad-{unique}"
    done = admin(
        worker, "sinks", "create", "--name", name, "--sink-type", "webhook",
        "--inputs", f"bad-in-{unique}", "--sink-config", json.dumps({"url": "ftp://x"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def error() -> str:
        return str(status(worker, "sinks", name)["instances"][0]["status"]["error"])

    wait_until(lambda: "url: must be an http:// or https:// URL" in error(), 30, what="error")
    assert status(worker, "sinks", name)["numRunning"] == 0

    # A built-in nobody ships is refused at once, with one line.
    done = admin(
        worker, "sources", "create", "--name", f"nope-{unique}", "--source-type", "nope",
        "--destination-topic-name", f"nope-{unique}",
    )  # fmt: skip
    assert done.returncode != 0
    assert "no built-in source named 'nope'" in done.stderr and "Traceback" not in done.stderr

    assert worker.proc.poll() is None
    assert admin(worker, "functions-worker", "get-cluster-leader").returncode == 0
