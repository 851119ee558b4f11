"""The web console's cost on the broker: the unbatched produce rate of one ``magnetar
standalone`` with the console closed and with it open, alternating in one run.

Each round runs two passes of ``broker.py``'s unbatched raw load (``run_raw``: a window of
unbatched SENDs to one topic, drained by an exclusive consumer) on the same topic:

* **closed**: no console tab, and none for longer than the sampler's demand window
  (:data:`magnetar.console.history.DEMAND_WINDOW_S` plus one sampling interval), so the
  broker runs no console task at all;
* **open**: a headless chromium (Debian's ``chromium`` and ``chromedriver``, driven by
  selenium as the console tests do) showing that topic's page, refreshing every
  ``--refresh-ms`` (the console's default, 5 s): a stats and a history request per refresh,
  and the history sampler running.

The browser runs on the same machine as the broker (its CPU is reported beside it; a real
user's browser is elsewhere). Per round, closed then open; the drift of a shared machine hits
both alike. Prints every pass and the medians of each figure with their ratio (open/closed),
and writes ``benchmarks/results/console.json``. Usage::

    python benchmarks/console.py [--seconds S] [--rounds N] [--size BYTES] [--refresh-ms MS]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import uvloop
from broker import (  # this directory: the script's own
    cpu_s,
    median,
    process_tree,
    start_standalone,
    wait_quiet,
)
from raw_generator import (  # this directory: the script's own
    SendFrames,
    entry_for,
    run_raw,
)
from selenium import webdriver

from magnetar.console.history import DEMAND_WINDOW_S, SAMPLE_INTERVAL_S
from magnetar.testing.browser import headless_chromium
from magnetar.testing.wait import wait_until

TOPIC = "console-bench"
PAGE_TIMEOUT_S = 30.0


def browser_cpu_s(driver: webdriver.Chrome) -> float:
    """CPU seconds of chromedriver and every chromium process under it."""
    total = 0.0
    for pid in process_tree(driver.service.process.pid):
        try:
            total += cpu_s(pid)
        except OSError:  # ended meanwhile
            continue
    return total


def open_topic_page(driver: webdriver.Chrome, http_url: str, refresh_ms: int) -> None:
    """Show the topic's page and wait until it has rendered (its history requested, so the
    broker's sampler runs)."""
    driver.get(f"{http_url}/?refresh={refresh_ms}#/topic/persistent/public/default/{TOPIC}")
    script = "const e = document.querySelector('#topic-title'); return e && e.textContent"
    wait_until(
        lambda: driver.execute_script(script) == f"persistent://public/default/{TOPIC}",
        PAGE_TIMEOUT_S,
        0.1,
        "the topic page shown",
    )


def one_pass(
    port: int, pid: int, frames: SendFrames, seconds: float, driver: webdriver.Chrome
) -> dict[str, float]:
    c0, b0 = cpu_s(pid), browser_cpu_s(driver)
    r = uvloop.run(run_raw(port, [f"persistent://public/default/{TOPIC}"], frames, seconds))
    return {
        "produce_msg_per_s": r["produce_msg_per_s"],
        "consume_msg_per_s": r["consume_msg_per_s"],
        "broker_cpu_us_per_msg": (cpu_s(pid) - c0) / r["messages"] * 1e6,
        "browser_cpu_s_per_s": (browser_cpu_s(driver) - b0) / seconds,
    }


def measure(args: argparse.Namespace) -> dict[str, object]:
    frames = SendFrames(*entry_for(args.size, False))
    idle_s = DEMAND_WINDOW_S + SAMPLE_INTERVAL_S + 1
    passes: dict[str, list[dict[str, float]]] = {"closed": [], "open": []}
    with tempfile.TemporaryDirectory() as tmp:
        node = start_standalone(Path(tmp) / "data", None)
        assert node.proc is not None
        pid = node.proc.pid
        try:
            driver = headless_chromium()
        except RuntimeError as exc:
            node.stop()
            raise SystemExit(str(exc)) from None
        try:
            wait_quiet(pid)
            uvloop.run(  # creates the topic and its subscription; warms the broker up
                run_raw(node.port, [f"persistent://public/default/{TOPIC}"], frames, 1.0)
            )
            for i in range(args.rounds):
                for label in ("closed", "open"):
                    if label == "closed":
                        driver.get("about:blank")
                        if i > 0:  # until the sampler has stopped
                            print(f"waiting {idle_s:.0f} s for the sampler to stop",
                                  file=sys.stderr, flush=True)  # fmt: skip
                            time.sleep(idle_s)
                    else:
                        open_topic_page(driver, node.http_url, args.refresh_ms)
                    wait_quiet(pid)
                    figures = one_pass(node.port, pid, frames, args.seconds, driver)
                    passes[label].append(figures)
                    print(f"round {i + 1}/{args.rounds} {label:6}", json.dumps(figures),
                          file=sys.stderr, flush=True)  # fmt: skip
        finally:
            driver.quit()
            node.stop()
    table: dict[str, object] = {
        "rounds": args.rounds,
        "seconds": args.seconds,
        "size_bytes": args.size,
        "refresh_ms": args.refresh_ms,
    }
    heading = f"unbatched {args.size} B, 1 topic (median of {args.rounds})"
    print(f"{heading:44} {'closed':>12} {'open':>12} {'open/closed':>12}")
    for key in passes["closed"][0]:
        closed = median([p[key] for p in passes["closed"]])
        opened = median([p[key] for p in passes["open"]])
        ratio = opened / closed if closed else float("nan")
        print(f"{key:44} {closed:12.3f} {opened:12.3f} {ratio:12.3f}")
        table[key] = {
            "closed": closed,
            "open": opened,
            "open_over_closed": ratio,
            "closed_runs": [p[key] for p in passes["closed"]],
            "open_runs": [p[key] for p in passes["open"]],
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each pass")
    parser.add_argument("--rounds", type=int, default=3, help="closed/open pairs")
    parser.add_argument("--size", type=int, default=100, help="message size in bytes")
    parser.add_argument(
        "--refresh-ms", type=int, default=5000, help="the open tab's refresh period"
    )
    args = parser.parse_args()
    table = measure(args)
    out = Path(__file__).parent / "results" / "console.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
