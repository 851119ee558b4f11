"""One function instance as its own process (started by :class:`ProcessRuntime`)::

    python -m magnetar.functions.instance_main --spec SPEC.json --status STATUS.json \\
        [--package-root DIR] [--venv DIR] [--lifeline-fd N]

The package was prepared by the runtime (``--package-root``/``--venv`` say where); this
process imports the function, runs the instance until SIGTERM or SIGINT, and keeps
``STATUS.json`` (an :class:`InstanceStatus` document) current: at start, when the input
subscription exists, every :data:`STATUS_INTERVAL_MS`, and last when it ends. With
``--lifeline-fd`` it also stops when that pipe reaches end-of-file, that is when the worker
that started it has ended (see :mod:`magnetar.common.lifeline`).

Exit codes: 0 stopped by a signal; :data:`EXIT_PACKAGE_ERROR` the package cannot be
imported (permanent: the runtime does not restart it); 1 the instance failed (the runtime
restarts it); 2 unusable arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

from magnetar.common.clock import SystemClock
from magnetar.common.lifeline import watch_lifeline
from magnetar.functions.function_loader import PackageError, PreparedPackage
from magnetar.functions.instance_factory import InstanceMaker, load_instance
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_stats import InstanceStats
from magnetar.functions.instance_status import InstanceStatus

STATUS_INTERVAL_MS = 250
EXIT_PACKAGE_ERROR = 3


def write_status(path: Path, status: InstanceStatus) -> None:
    """Atomically (write, then rename): a reader never sees half a document."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status.to_json()))
    os.replace(tmp, path)


def read_status(path: Path) -> InstanceStatus | None:
    """The last status written, or None when there is none (yet) or it is unreadable."""
    try:
        return InstanceStatus.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Reporter:
    def __init__(self, spec: InstanceSpec, path: Path, stats: InstanceStats) -> None:
        self.spec = spec
        self.path = path
        self.stats = stats
        self.running = False
        self.error = ""

    def write(self) -> None:
        write_status(
            self.path,
            self.stats.snapshot(
                instance_id=self.spec.instance_id,
                running=self.running,
                worker_id=self.spec.worker_id,
                error=self.error,
            ),
        )

    def mark_running(self) -> None:
        self.running = True
        self.write()


async def _run(reporter: _Reporter, make_instance: InstanceMaker) -> int:
    clock = SystemClock()
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    stopped = False

    def on_signal() -> None:
        nonlocal stopped
        stopped = True
        main.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)

    async def report_periodically() -> None:
        while True:
            await clock.sleep(STATUS_INTERVAL_MS / 1000)
            reporter.write()

    reporter_task = asyncio.create_task(report_periodically())
    instance = make_instance()
    try:
        await instance.run()
        return 1
    except asyncio.CancelledError:
        if not stopped:
            raise
        return 0
    except Exception as exc:
        reporter.error = f"{type(exc).__name__}: {exc}"
        reporter.stats.record_system_exception(exc)
        logging.getLogger(__name__).error("instance failed: %s", reporter.error)
        return 1
    finally:
        reporter_task.cancel()
        reporter.running = False
        reporter.write()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.functions.instance_main")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--package-root", type=Path, default=None)
    parser.add_argument("--venv", type=Path, default=None)
    parser.add_argument("--lifeline-fd", type=int, default=None)
    args = parser.parse_args(argv)
    if args.lifeline_fd is not None:
        # First, before anything slow (imports of user code): a worker that is already
        # gone is noticed at once.
        try:
            watch_lifeline(args.lifeline_fd)
        except OSError as exc:
            print(f"error: unusable --lifeline-fd {args.lifeline_fd}: {exc}", file=sys.stderr)
            return 2
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        spec = InstanceSpec.from_json(json.loads(args.spec.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: unusable spec {args.spec}: {exc}", file=sys.stderr)
        return 2
    clock = SystemClock()
    stats = InstanceStats(clock)
    reporter = _Reporter(spec, args.status, stats)
    try:
        make_instance = load_instance(
            spec,
            PreparedPackage(args.package_root, args.venv),
            clock=clock,
            stats=stats,
            on_running=reporter.mark_running,
        )
    except PackageError as exc:
        reporter.error = str(exc)
        reporter.write()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PACKAGE_ERROR
    reporter.write()
    code = 0
    with contextlib.suppress(KeyboardInterrupt):
        code = asyncio.run(_run(reporter, make_instance))
    return code


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the interpreter would wait at exit for every non-daemon thread, and the
    # function may have started its own that never end; the status is written, nothing
    # else is owed.
    os._exit(exit_code)
