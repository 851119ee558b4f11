"""Broker throughput with the official client against ``magnetar standalone``.

Starts a standalone on free ports with a temporary data dir, produces N messages (batched
and unbatched, 100-byte payloads), consumes them back, prints msg/s and writes
``benchmarks/results/broker.json``. Usage: ``python benchmarks/broker.py [N]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.compat.helpers import StandaloneProcess, new_client


def run(n: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        node = StandaloneProcess(Path(tmp) / "data")
        t0 = time.perf_counter()
        node.start()
        results["standalone_ready_s"] = time.perf_counter() - t0
        try:
            client = new_client(node.url)
            payload = b"x" * 100
            for batching in (False, True):
                topic = f"bench-{'batched' if batching else 'single'}"
                consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
                producer = client.create_producer(
                    topic, batching_enabled=batching, max_pending_messages=5000,
                    block_if_queue_full=True,
                )  # fmt: skip
                t0 = time.perf_counter()
                for _ in range(n):
                    producer.send_async(payload, None)
                producer.flush()
                produce_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                for _ in range(n):
                    consumer.acknowledge(consumer.receive(10_000))
                consume_s = time.perf_counter() - t0
                key = "batched" if batching else "unbatched"
                results[f"produce_{key}_msg_per_s"] = n / produce_s
                results[f"consume_{key}_msg_per_s"] = n / consume_s
            client.close()
        finally:
            node.stop()
    return results


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    results = run(n)
    for k, v in results.items():
        print(f"{k:32} {v:12.2f}")
    out = Path(__file__).parent / "results" / "broker.json"
    out.write_text(json.dumps({"messages": n, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
