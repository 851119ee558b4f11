"""Start-up time of ``magnetar standalone``: the source of the figure the docs quote.

Two figures per start, each over ``--runs`` starts on a fresh data directory and as many
restarts on a directory that already holds a topic:

* wall-clock: from spawning the process to reading its ready line (what a user waits for,
  interpreter start and imports included);
* reported: the ``(N ms)`` of the ready line, from the command's entry to serving (the
  process's own count, without the interpreter's start);
* CPU at ready: the process's CPU time (user + system) when its ready line is read, the
  figure a loaded shared machine distorts least.

Each start is stopped with SIGTERM before the next. Usage::

    python benchmarks/startup.py [--runs N] [--compare-to TREE [--importtime]]
                                 [--no-functions-worker]

With ``--compare-to`` (a checkout's directory, or a commit of this repository), fresh starts
of that tree and of this one alternate (old, new, old, ...: a shared machine's drift hits
both alike), and each start also gives its resident memory ``IDLE_AFTER_S`` after the ready
line (the Functions Worker has joined by then); it prints the medians side by side. With
``--importtime`` it also starts each tree ``IMPORTTIME_RUNS`` times under ``-X importtime``
(through ``ready_marker.py``) and gives the median sum of the imports' own times before the
ready line and the number of modules imported by then: CPU spent importing, which a loaded
machine inflates less than wall-clock time.

Prints the median, minimum and maximum of each, with the machine's load average (start-up is
CPU-bound: imports and byte-code), and writes ``benchmarks/results/startup.json``. Each
tree is byte-compiled first (``compileall``), as an installed package is: under
``PYTHONDONTWRITEBYTECODE`` (set on the test machines) a start would otherwise compile every
module of its own from source, which took half of its CPU.
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

from broker import byte_compile, cpu_s, rss_mb, source_tree  # this directory: the script's own

from magnetar.testing import StandaloneProcess

READY_TIMEOUT_S = 60.0
REPORTED_MS = re.compile(r"\((\d+) ms\)\s*$")
IDLE_AFTER_S = 3.0
"""When the idle resident memory is read, after the ready line."""
IMPORTTIME_RUNS = 3
READY_MARKER = "---- ready line ----"  # ready_marker.py's
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def imports_before_ready(
    data_dir: Path, src: Path | None = None, extra: tuple[str, ...] = ()
) -> tuple[float, int]:
    """(sum of the imports' own ms, modules imported) before the ready line of one start of
    the tree ``src`` (None: this one) under ``-X importtime``; stops the process."""
    marker = Path(__file__).parent / "ready_marker.py"
    args = [
        sys.executable, "-X", "importtime", str(marker), "standalone", "--data-dir",
        str(data_dir), "--port", "0", "--http-port", "0", *extra,
    ]  # fmt: skip
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    self_us = modules = 0
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the imports' lines come in order, the marker among them
            if line.startswith(READY_MARKER):
                return self_us / 1000, modules
            match = IMPORT_LINE.match(line)
            if match is not None:
                self_us += int(match.group(1))
                modules += 1
        raise RuntimeError("the standalone ended without a ready line")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(READY_TIMEOUT_S)


def start_once(
    data_dir: Path, src: Path | None = None, extra: tuple[str, ...] = (), idle_rss: bool = False
) -> tuple[float, ...]:
    """(wall-clock ms to the ready line, the ms the ready line reports, the process's CPU
    ms when the line is read[, resident MB ``IDLE_AFTER_S`` later]) of the tree ``src``
    (None: this one); stops the process."""
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(data_dir),
        "--port", "0", "--http-port", "0", *extra,
    ]  # fmt: skip
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the ready line (or the end: a failure)
        wall_ms = (time.perf_counter() - t0) * 1000
        cpu_ms = cpu_s(proc.pid) * 1000  # what the start cost, however loaded the machine
        match = REPORTED_MS.search(line)
        if match is None:
            raise RuntimeError(f"no ready line from the standalone: {line!r}")
        if not idle_rss:
            return wall_ms, float(match.group(1)), cpu_ms
        time.sleep(IDLE_AFTER_S)  # a benchmark's pause, not a test's wait
        return wall_ms, float(match.group(1)), cpu_ms, rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(READY_TIMEOUT_S)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values)),
        "min": round(min(values)),
        "max": round(max(values)),
    }


def compare(
    spec: str, runs: int, extra: tuple[str, ...], importtime: bool = False
) -> dict[str, object]:
    """``runs`` fresh starts of ``spec``'s tree and of this one, alternating (and as many
    more under ``-X importtime`` with ``importtime``); prints and returns the medians of
    each figure side by side."""
    names = ("wall_ms", "reported_ms", "cpu_ms_at_ready", "rss_mb_idle")
    before: list[tuple[float, ...]] = []
    after: list[tuple[float, ...]] = []
    with tempfile.TemporaryDirectory() as tmp:
        src = source_tree(spec, Path(tmp))
        for i in range(runs):
            before.append(start_once(Path(tmp) / f"old-{i}", src, extra, idle_rss=True))
            after.append(start_once(Path(tmp) / f"new-{i}", None, extra, idle_rss=True))
        if importtime:
            names += ("import_self_ms_before_ready", "modules_before_ready")
            for i in range(IMPORTTIME_RUNS):  # a start's figures, then its imports' figures
                old = imports_before_ready(Path(tmp) / f"old-imports-{i}", src, extra)
                new = imports_before_ready(Path(tmp) / f"new-imports-{i}", None, extra)
                before.append((0.0,) * 4 + old)
                after.append((0.0,) * 4 + new)
    table: dict[str, object] = {"compare_to": spec, "runs": runs, "options": list(extra)}
    print(f"{'fresh start (median of ' + str(runs) + ')':32} {'before':>10} {'after':>10}  ratio")
    for n, name in enumerate(names):
        b = statistics.median(r[n] for r in before if (len(r) > 4) == (n >= 4))
        a = statistics.median(r[n] for r in after if (len(r) > 4) == (n >= 4))
        table[name] = {"before": round(b, 1), "after": round(a, 1), "ratio": round(a / b, 2)}
        print(f"{name:32} {b:10.1f} {a:10.1f}  x{a / b:.2f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="starts of each kind")
    parser.add_argument("--compare-to", help="a checkout's directory or a commit")
    parser.add_argument("--no-functions-worker", action="store_true")
    parser.add_argument(
        "--importtime",
        action="store_true",
        help="with --compare-to: also the imports' CPU before the ready line (-X importtime)",
    )
    args = parser.parse_args()
    extra = ("--no-functions-worker",) if args.no_functions_worker else ()
    if args.compare_to is not None:
        table = compare(args.compare_to, args.runs, extra, args.importtime)
        table["load_average_1m"] = os.getloadavg()[0]
        suffix = "-no-functions-worker" if args.no_functions_worker else ""
        out = Path(__file__).parent / "results" / f"startup-compare{suffix}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(table, indent=2) + "\n")
        return
    # The machine's load says how far the figures are from an idle machine's.
    results: dict[str, object] = {"runs": args.runs, "load_average_1m_before": os.getloadavg()[0]}
    byte_compile(Path(__file__).resolve().parent.parent / "src")
    with tempfile.TemporaryDirectory() as tmp:
        fresh = [start_once(Path(tmp) / f"fresh-{i}", extra=extra) for i in range(args.runs)]
        # a directory that holds a topic with messages and a subscription
        kept = Path(tmp) / "kept"
        with StandaloneProcess(kept) as node:
            subprocess.run(
                [sys.executable, "-m", "magnetar.cli.main", "client", "--url", node.url,
                 "produce", "startup-bench", "-m", "x", "-n", "1000"],
                check=True, capture_output=True, timeout=READY_TIMEOUT_S,
            )  # fmt: skip
        restarts = [start_once(kept, extra=extra) for _ in range(args.runs)]
    results["load_average_1m_after"] = os.getloadavg()[0]
    results["cpus"] = os.cpu_count() or 0
    for kind, starts in (("fresh", fresh), ("restart", restarts)):
        results[f"{kind}_wall_ms"] = summary([s[0] for s in starts])
        results[f"{kind}_reported_ms"] = summary([s[1] for s in starts])
        results[f"{kind}_cpu_ms_at_ready"] = summary([s[2] for s in starts])
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / "startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
