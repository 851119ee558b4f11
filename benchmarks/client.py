"""Client throughput: magnetar.client against the official pulsar-client wheel.

Starts ``magnetar standalone`` (free ports, temporary data dir), then measures for each
client: batched publish of N x 100-byte messages (send_async, then flush) and consume
(receive + acknowledge) of the same N. Prints msg/s and writes
``benchmarks/results/client.json``.

    .venv/bin/python benchmarks/client.py [--messages 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar

from magnetar.client import Client, ConsumerType, InitialPosition

PAYLOAD = b"x" * 100


def start_standalone(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(data_dir),
         "--port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "ready" in line:
            words = line.split()
            threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True).start()
            return proc, "pulsar://" + words[words.index("broker") + 1].split("://")[-1]
    raise RuntimeError("standalone did not start")


async def ours(url: str, n: int) -> dict[str, float]:
    topic = f"persistent://public/default/bench-ours-{uuid.uuid4().hex[:8]}"
    async with Client(url) as client:
        consumer = await client.subscribe(
            topic, "bench", consumer_type=ConsumerType.Exclusive,
            initial_position=InitialPosition.Earliest, receiver_queue_size=5000,
        )  # fmt: skip
        producer = await client.create_producer(
            topic, max_pending_messages=n, batching_max_messages=1000
        )
        t0 = time.perf_counter()
        send = producer.send_async
        for _ in range(n):
            send(PAYLOAD)
        await producer.flush()
        produce_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        receive, ack = consumer.receive, consumer.acknowledge
        for _ in range(n):
            await ack(await receive())
        consume_s = time.perf_counter() - t0
    return {"produce_msg_s": n / produce_s, "consume_msg_s": n / consume_s}


def official(url: str, n: int) -> dict[str, float]:
    topic = f"persistent://public/default/bench-wheel-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(url)
    consumer = client.subscribe(
        topic, "bench", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5000
    )
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        max_pending_messages=n,
        block_if_queue_full=True,
    )
    t0 = time.perf_counter()
    for _ in range(n):
        producer.send_async(PAYLOAD, None)
    producer.flush()
    produce_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive())
    consume_s = time.perf_counter() - t0
    client.close()
    return {"produce_msg_s": n / produce_s, "consume_msg_s": n / consume_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_standalone(Path(tmp) / "data")
        try:
            result = {
                "messages": args.messages,
                "payload_bytes": len(PAYLOAD),
                "magnetar_client": asyncio.run(ours(url, args.messages)),
                "official_wheel": official(url, args.messages),
            }
        finally:
            proc.kill()
            proc.wait()
    for name in ("magnetar_client", "official_wheel"):
        r = result[name]
        assert isinstance(r, dict)
        print(
            f"{name:16s} produce {r['produce_msg_s']:>10,.0f} msg/s   consume {r['consume_msg_s']:>10,.0f} msg/s"
        )
    out = Path(__file__).parent / "results" / "client.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
