"""Runs ``flex_driver.js`` (pulsar-flex, an independent JavaScript implementation of Pulsar's
binary protocol) as a real Node.js process and reads its JSON events as they come."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "flex_driver.js"
PACKAGE = HERE / "node_modules" / "pulsar-flex" / "package.json"


def node() -> str:
    """The ``node`` executable; fails (never skips) when Node.js or pulsar-flex is missing."""
    found = shutil.which("node")
    assert found, "Node.js is missing: make test installs it (Debian's nodejs and npm)"
    assert PACKAGE.exists(), "pulsar-flex is missing: make test runs npm ci --prefix tests/interop"
    return found


class FlexProcess:
    """One driver process; its stdout lines are decoded into :attr:`events` by a thread."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.proc = subprocess.Popen(
            [node(), str(DRIVER), json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._events.put(json.loads(line))
        self._events.put({"event": "exit"})

    def next_event(self, timeout_s: float = 30.0) -> dict[str, Any]:
        try:
            event = self._events.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(
                f"pulsar-flex said nothing for {timeout_s} s: {self.spec}"
            ) from None
        self.seen.append(event)
        if event["event"] == "error":
            raise AssertionError(f"pulsar-flex failed: {event['message']}")
        return event

    def wait_for(self, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The next event called ``name``; earlier events stay in :attr:`seen`."""
        while True:
            event = self.next_event(timeout_s)
            if event["event"] == name:
                return event
            if event["event"] == "exit":
                stderr = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"pulsar-flex exited before {name!r}: {self.seen} {stderr}")

    def messages(self) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["event"] == "message"]

    def collect(self, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Waits until ``count`` messages were seen in all."""
        while len(self.messages()) < count:
            self.wait_for("message", timeout_s)
        return self.messages()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def produce(
    servers: list[str],
    topic: str,
    payloads: list[str],
    *,
    batch: bool = False,
    properties: dict[str, str] | None = None,
    jwt: str | None = None,
) -> None:
    """Produces with pulsar-flex and waits for its receipts (the process exits 0)."""
    spec = {
        "op": "produce", "servers": servers, "topic": topic, "batch": batch, "jwt": jwt,
        "messages": [{"payload": p, "properties": properties or {}} for p in payloads],
    }  # fmt: skip
    process = FlexProcess(spec)
    try:
        assert process.wait_for("sent")["count"] == len(payloads)
        assert process.proc.wait(30) == 0
    finally:
        process.kill()


def consumer(
    servers: list[str],
    topic: str,
    subscription: str,
    sub_type: str,
    *,
    name: str = "flex",
    count: int = 0,
    ack: str = "individual",
    jwt: str | None = None,
) -> FlexProcess:
    """A subscribed pulsar-flex consumer (returns once SUBSCRIBE was answered)."""
    process = FlexProcess({
        "op": "consume", "servers": servers, "topic": topic, "subscription": subscription,
        "subType": sub_type, "name": name, "count": count, "ack": ack, "jwt": jwt,
    })  # fmt: skip
    try:
        process.wait_for("subscribed")
    except BaseException:
        process.kill()
        raise
    return process
