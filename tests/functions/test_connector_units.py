"""The built-in connectors without a broker: every unusable setting refused naming itself,
the data generator's pace on a manual clock, the file source's order, ownership and
checkpoints, the webhook sink's retries and backoff (an injected sleep), and the PostgreSQL
sink's statements."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from magnetar.common.clock import ManualClock
from magnetar.functions.connectors.connector import InvalidConnectorConfig
from magnetar.functions.connectors.datagen_source import DatagenSource
from magnetar.functions.connectors.file_source import FileSource
from magnetar.functions.connectors.postgres_sink import PostgresSink
from magnetar.functions.connectors.registry import builtin_name
from magnetar.functions.connectors.webhook_sink import WebhookError, WebhookSink
from magnetar.functions.function_config import ComponentKind, FunctionConfig


@pytest.mark.parametrize(
    ("make", "config", "message"),
    [
        (lambda c: DatagenSource(c, instance_id=0, clock=ManualClock()), {"ratePerSecond": 0},
         "ratePerSecond: must be above 0"),
        (lambda c: DatagenSource(c, instance_id=0, clock=ManualClock()), {"ratePerSecond": "x"},
         "ratePerSecond: must be a float"),
        (lambda c: DatagenSource(c, instance_id=0, clock=ManualClock()), {"count": -5},
         "count: must not be negative"),
        (lambda c: FileSource(c, instance_id=0, parallelism=1, clock=ManualClock()), {},
         "inputDirectory: missing"),
        (lambda c: FileSource(c, instance_id=0, parallelism=1, clock=ManualClock()),
         {"inputDirectory": "/nonexistent-dir"}, "inputDirectory: /nonexistent-dir is not a"),
        (lambda c: FileSource(c, instance_id=0, parallelism=1, clock=ManualClock()),
         {"inputDirectory": "/", "fileFilter": "("}, "fileFilter: not a regular expression"),
        (WebhookSink, {}, "url: missing"),
        (WebhookSink, {"url": "ftp://x"}, "url: must be an http:// or https:// URL"),
        (WebhookSink, {"url": "http://x", "maxRetries": 1000}, "maxRetries: must be 0..100"),
        (WebhookSink, {"url": "http://x", "headers": {"a": 1}}, "headers: must map names"),
        (PostgresSink, {"tableName": "t"}, "connection: missing"),
        (PostgresSink, {"connection": "host=x", "tableName": "a.b.c"}, "tableName: must be"),
        (PostgresSink, {"connection": "nonsense", "tableName": "t"}, "connection: "),
        (PostgresSink, {"connection": "host=x", "tableName": "t", "columns": {"a": "a"},
                        "key": "b"}, "key: every key column must be one of columns"),
    ],
)  # fmt: skip
def test_unusable_settings_are_refused_naming_the_setting(
    make: Callable[[dict[str, Any]], object], config: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidConnectorConfig, match=message.replace("(", r"\(")):
        make(config)


def test_builtin_names() -> None:
    def config(kind: ComponentKind, class_name: str) -> FunctionConfig:
        extra: dict[str, Any] = (
            {"output": "out"} if kind is ComponentKind.SOURCE else {"inputs": ("in",)}
        )
        return FunctionConfig(
            tenant="public", namespace="default", name="c", kind=kind, class_name=class_name,
            **extra,
        )  # fmt: skip

    assert builtin_name(config(ComponentKind.SOURCE, "builtin://datagen")) == "datagen"
    assert builtin_name(config(ComponentKind.SINK, "postgres")) == "postgres"
    with pytest.raises(InvalidConnectorConfig, match="no built-in sink named 'datagen'"):
        builtin_name(config(ComponentKind.SINK, "datagen"))
    # Pulsar's SourceConfig spelling: archive and configs
    parsed = FunctionConfig.from_json(
        {"tenant": "public", "namespace": "default", "name": "g", "topicName": "out",
         "archive": "builtin://datagen", "configs": {"ratePerSecond": 5}},
        kind=ComponentKind.SOURCE,
    )  # fmt: skip
    assert parsed.class_name == "builtin://datagen" and parsed.user_config == {"ratePerSecond": 5}
    assert parsed.output == "persistent://public/default/out"


async def test_datagen_keeps_its_rate_on_the_clock_and_stops_at_count() -> None:
    clock = ManualClock()
    source = DatagenSource({"ratePerSecond": 4, "count": 3}, instance_id=2, clock=clock)
    first = json.loads((await source.read()).value)
    assert first["sequence"] == 0 and first["instance"] == 2
    second = asyncio.ensure_future(source.read())
    await asyncio.sleep(0)
    assert not second.done() and clock.sleepers == 1  # due 0.25 s after the first
    clock.advance(0.25)
    assert json.loads((await second).value)["sequence"] == 1
    clock.advance(0.25)
    assert json.loads((await source.read()).value)["sequence"] == 2
    idle = asyncio.ensure_future(source.read())
    clock.advance(10)
    await asyncio.sleep(0)
    assert not idle.done()  # count reached: nothing more
    idle.cancel()


async def test_file_source_reads_oldest_first_and_marks_files_done_once_stored(
    tmp_path: Path,
) -> None:
    for name, text, mtime in (("b.txt", "b1\nb2\n", 2), ("a.txt", "a1\r\n", 1),
                              (".hidden", "x\n", 0), ("c.txt.processed", "old\n", 0)):  # fmt: skip
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, (mtime, mtime))
    source = FileSource({"inputDirectory": str(tmp_path)}, instance_id=0, parallelism=1,
                        clock=ManualClock())  # fmt: skip
    a1 = await source.read()
    assert (a1.value, a1.properties) == (b"a1", {"file": "a.txt"})
    assert a1.on_stored is not None  # the file's last line is its checkpoint
    b1, b2 = await source.read(), await source.read()
    assert [b1.value, b2.value] == [b"b1", b"b2"] and b1.on_stored is None
    assert (tmp_path / "a.txt").exists()  # not done before its lines are stored
    a1.on_stored()
    assert b2.on_stored is not None
    b2.on_stored()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".hidden", "a.txt.processed", "b.txt.processed", "c.txt.processed",
    ]  # fmt: skip
    await source.close()


def test_file_source_instances_share_files_without_overlap(tmp_path: Path) -> None:
    names = [f"f{i}.txt" for i in range(20)]
    for name in names:
        (tmp_path / name).write_text("x\n")
    owners = {
        n: zlib.crc32(n.encode()) % 3 for n in names
    }  # the rule each instance applies to itself

    async def first_files(instance_id: int) -> set[str]:
        source = FileSource({"inputDirectory": str(tmp_path)}, instance_id=instance_id,
                            parallelism=3, clock=ManualClock())  # fmt: skip
        seen = set()
        for _ in range(sum(1 for o in owners.values() if o == instance_id)):
            seen.add(dict((await source.read()).properties)["file"])
        return seen

    for i in range(3):
        assert asyncio.run(first_files(i)) == {n for n, o in owners.items() if o == i}


class _Flaky(BaseHTTPRequestHandler):
    codes: list[int] = []  # noqa: RUF012 (set per test)
    bodies: list[bytes] = []  # noqa: RUF012

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        code = self.codes.pop(0) if self.codes else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    _Flaky.codes, _Flaky.bodies = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Context:
    def get_current_message_topic_name(self) -> str:
        return "persistent://public/default/in"

    def get_message_id(self) -> None:
        return None

    def get_message_key(self) -> None:
        return None

    def get_message_properties(self) -> dict[str, str]:
        return {}


def test_webhook_retries_with_doubling_backoff_then_gives_up(flaky: str) -> None:
    sleeps: list[float] = []
    sink = WebhookSink(
        {"url": flaky, "maxRetries": 3, "retryBackoffMs": 100, "retryBackoffMaxMs": 250},
        sleep=sleeps.append,
    )
    _Flaky.codes = [503, 429, 500]
    sink.process("hello", _Context())
    assert sleeps == [0.1, 0.2, 0.25] and _Flaky.bodies == [b"hello"] * 4
    _Flaky.codes, sleeps[:] = [503] * 4, []
    with pytest.raises(WebhookError, match=r"HTTP 503 \(4 attempt\(s\)\)"):
        sink.process("again", _Context())
    _Flaky.codes, sleeps[:] = [400], []
    with pytest.raises(WebhookError, match="HTTP 400"):
        sink.process("bad", _Context())
    assert sleeps == []  # a 4xx other than 429 is not retried


def test_postgres_statements() -> None:
    sink = PostgresSink({"connection": "host=x", "tableName": "s.people", "key": ["id"]})
    statement = sink._statement(["id", "name"]).as_string(None)
    assert statement == (
        'INSERT INTO "s"."people" ("id", "name") VALUES (%s, %s) '
        'ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name"'
    )
    plain = PostgresSink({"connection": "host=x", "tableName": "people"})
    assert plain._statement(["a"]).as_string(None) == 'INSERT INTO "people" ("a") VALUES (%s)'
    with pytest.raises(ValueError, match="must be a JSON object"):
        plain.process("[1]", None)
    with pytest.raises(ValueError, match="no value for key column"):
        sink.process('{"name": "x"}', None)
