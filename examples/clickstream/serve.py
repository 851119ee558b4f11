"""Serve the latest aggregation results: tail the results topic, keep the newest value per
key (``page|window start``), answer ``GET /results`` with them as JSON.

    python examples/clickstream/serve.py --service-url pulsar://127.0.0.1:6650 --port 8000
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from magnetar.client import MessageId, Timeout
from magnetar.client.sync import Client


class LatestResults:
    """Newest result per key, fed by a reader from the start of the results topic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}

    def apply(self, key: str, value: bytes) -> None:
        with self._lock:
            self._latest[key] = json.loads(value)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._latest)

    def catch_up(self, service_url: str, topic: str, idle_ms: int = 1000) -> None:
        """Read everything now in ``topic`` (until ``idle_ms`` pass without a message)."""
        with Client(service_url) as client:
            self.tail(client.create_reader(topic, MessageId.earliest), idle_ms)

    def tail(self, reader: Any, idle_ms: int | None = None) -> None:
        while True:
            try:
                msg = reader.read_next(idle_ms)
            except Timeout:
                return
            self.apply(msg.partition_key(), msg.data())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--results", default="clicks-per-minute")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    latest = LatestResults()
    client = Client(args.service_url)
    reader = client.create_reader(args.results, MessageId.earliest)
    threading.Thread(target=latest.tail, args=(reader,), daemon=True).start()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(latest.snapshot(), indent=1).encode()
            self.send_response(200 if self.path == "/results" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

    print(f"serving http://127.0.0.1:{args.port}/results")
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
