"""Start-up time of ``magnetar standalone``: the source of the figure the docs quote.

Two figures per start, each over ``--runs`` starts on a fresh data directory and as many
restarts on a directory that already holds a topic:

* wall-clock: from spawning the process to reading its ready line (what a user waits for,
  interpreter start and imports included);
* reported: the ``(N ms)`` of the ready line, from the command's entry to serving (the
  process's own count, without the interpreter's start).

Each start is stopped with SIGTERM before the next. Usage::

    python benchmarks/startup.py [--runs N]

Prints the median, minimum and maximum of each, with the machine's load average (start-up is
CPU-bound: imports and byte-code), and writes ``benchmarks/results/startup.json``. Run it
without ``PYTHONDONTWRITEBYTECODE``: with it, each start compiles every module again (it says
so in ``bytecode_cache``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from magnetar.testing import StandaloneProcess

READY_TIMEOUT_S = 60.0
REPORTED_MS = re.compile(r"\((\d+) ms\)\s*$")


def start_once(data_dir: Path) -> tuple[float, float]:
    """(wall-clock ms to the ready line, the ms the ready line reports); stops the process."""
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(data_dir),
        "--port", "0", "--http-port", "0",
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the ready line (or the end: a failure)
        wall_ms = (time.perf_counter() - t0) * 1000
        match = REPORTED_MS.search(line)
        if match is None:
            raise RuntimeError(f"no ready line from the standalone: {line!r}")
        return wall_ms, float(match.group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(READY_TIMEOUT_S)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values)),
        "min": round(min(values)),
        "max": round(max(values)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="starts of each kind")
    args = parser.parse_args()
    # The machine's load says how far the figures are from an idle machine's.
    results: dict[str, object] = {"runs": args.runs, "load_average_1m_before": os.getloadavg()[0]}
    # With PYTHONDONTWRITEBYTECODE set, every start compiles each module from source (about
    # a third more CPU): the figure is then not the one users see.
    results["bytecode_cache"] = not sys.flags.dont_write_bytecode
    if sys.flags.dont_write_bytecode:
        print(
            "warning: PYTHONDONTWRITEBYTECODE is set: every start compiles its modules",
            file=sys.stderr,
        )
    with tempfile.TemporaryDirectory() as tmp:
        fresh = [start_once(Path(tmp) / f"fresh-{i}") for i in range(args.runs)]
        # a directory that holds a topic with messages and a subscription
        kept = Path(tmp) / "kept"
        with StandaloneProcess(kept) as node:
            subprocess.run(
                [sys.executable, "-m", "magnetar.cli.main", "client", "--url", node.url,
                 "produce", "startup-bench", "-m", "x", "-n", "1000"],
                check=True, capture_output=True, timeout=READY_TIMEOUT_S,
            )  # fmt: skip
        restarts = [start_once(kept) for _ in range(args.runs)]
    results["load_average_1m_after"] = os.getloadavg()[0]
    results["cpus"] = os.cpu_count() or 0
    for kind, starts in (("fresh", fresh), ("restart", restarts)):
        results[f"{kind}_wall_ms"] = summary([w for w, _ in starts])
        results[f"{kind}_reported_ms"] = summary([r for _, r in starts])
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / "startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
