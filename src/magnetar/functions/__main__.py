"""``python -m magnetar.functions``: one worker that joins its worker cluster and stays until
SIGTERM or SIGINT (membership and leadership only, for now; see ``docs/functions.md``).

It prints one line to stdout per event, flushed, so a supervising process can follow it::

    joined w1:127.0.0.1:6750
    leader 1          # became leader, term 1
    follower 1        # lost leadership after term 1

A setting that cannot work, or a broker that refuses the worker, prints one line to stderr
(``error: …``) and exits with status 2 (settings) or 1 (joining failed).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from magnetar.common.errors import MagnetarError
from magnetar.functions.leadership import LeadershipChanged
from magnetar.functions.worker import FunctionsWorker
from magnetar.functions.worker_config import (
    DEFAULT_ASSIGNMENTS_TOPIC,
    DEFAULT_COORDINATION_SUBSCRIPTION,
    DEFAULT_COORDINATION_TOPIC,
    InvalidWorkerConfig,
    WorkerConfig,
)
from magnetar.functions.worker_info import InvalidWorkerInfo, WorkerInfo


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m magnetar.functions", description=__doc__)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--host", default="127.0.0.1", help="this worker's advertised host")
    p.add_argument("--port", type=int, default=6750, help="this worker's advertised port")
    p.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    p.add_argument("--admin-url", default="http://127.0.0.1:8080")
    p.add_argument("--coordination-topic", default=DEFAULT_COORDINATION_TOPIC)
    p.add_argument("--coordination-subscription", default=DEFAULT_COORDINATION_SUBSCRIPTION)
    p.add_argument("--assignments-topic", default=DEFAULT_ASSIGNMENTS_TOPIC)
    return p


def _say(line: str) -> None:
    print(line, flush=True)


def _report(change: LeadershipChanged) -> None:
    _say(f"{'leader' if change.is_leader else 'follower'} {change.term}")


async def _run(config: WorkerConfig) -> int:
    worker = FunctionsWorker(config)
    worker.add_leadership_listener(_report)
    try:
        await worker.start()
    except MagnetarError as exc:
        print(f"error: cannot join {config.coordination_topic}: {exc}", file=sys.stderr)
        return 1
    _say(f"joined {config.worker.consumer_name}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await worker.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = WorkerConfig(
            worker=WorkerInfo(args.worker_id, args.host, args.port),
            service_url=args.service_url,
            admin_url=args.admin_url,
            coordination_topic=args.coordination_topic,
            coordination_subscription=args.coordination_subscription,
            assignments_topic=args.assignments_topic,
        )
    except (InvalidWorkerConfig, InvalidWorkerInfo) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(config))


if __name__ == "__main__":
    sys.exit(main())
