"""Produce page-view events to a topic: JSON ``{"page", "user", "action", "ts"}`` with
``action`` "view" or "purchase" (about 1 in 10), keyed by page, event time set.

    python examples/clickstream/generator.py --service-url pulsar://127.0.0.1:6650 --events 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from magnetar.client import Client

PAGES = ("home", "search", "product", "cart", "checkout")


async def generate(
    service_url: str,
    topic: str,
    events: int,
    *,
    start_ms: int | None = None,
    seed: int = 1,
    close_windows: bool = False,
) -> dict[tuple[str, str], int]:
    """Send ``events`` events spread over five minutes of event time from ``start_ms``;
    returns how many of each ``(page, action)`` were sent. ``close_windows`` adds one
    ``_tick`` event 15 minutes later, so a watermark closes every window of the batch."""
    rng = random.Random(seed)
    start_ms = start_ms if start_ms is not None else int(time.time() * 1000) - 5 * 60_000
    sent: dict[tuple[str, str], int] = {}
    async with Client(service_url) as client:
        producer = await client.create_producer(topic, max_pending_messages=10_000)
        futures = []
        for i in range(events):
            page = rng.choice(PAGES)
            action = "purchase" if rng.random() < 0.1 else "view"
            ts = start_ms + i * 300_000 // max(events, 1)  # five minutes of events
            body = {"page": page, "user": f"u{rng.randrange(500)}", "action": action, "ts": ts}
            futures.append(
                producer.send_async(
                    json.dumps(body).encode(), partition_key=page, event_timestamp=ts
                )
            )
            sent[(page, action)] = sent.get((page, action), 0) + 1
            if len(futures) >= 5000:
                await asyncio.gather(*futures)
                futures.clear()
        if close_windows:
            # An event well past the rest moves the watermark beyond every window above.
            tick = {"page": "_tick", "user": "", "action": "tick", "ts": start_ms + 900_000}
            futures.append(
                producer.send_async(json.dumps(tick).encode(), event_timestamp=tick["ts"])
            )
        await producer.flush()
        await asyncio.gather(*futures)
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    sent = asyncio.run(generate(args.service_url, args.topic, args.events))
    print(f"sent {sum(sent.values())} events to {args.topic}")


if __name__ == "__main__":
    main()
