"""Broker throughput, latency, CPU per message, start-up time and memory of ``magnetar standalone``.

The load is the raw-protocol generator of ``raw_generator.py`` (about 2-3 us of its CPU per
message, so not the bottleneck): a window of 500 SENDs in flight on a raw asyncio
connection, topped up as receipts arrive, and a raw consumer on another connection draining
every partition (exclusive subscription), granting permits and acknowledging cumulatively.
Generator and consumer share this process (uvloop); the broker and its bookie are the
standalone process.

Matrix: 100 B and 1 KiB messages, unbatched and batched, 1 and 4 partitions (maximum rates,
produced and consumed end to end, with the broker's and the generator's CPU per message);
publish latency p50/p99/p99.9 at half the maximum unbatched rate of one partition (SEND
written to receipt read), measured once the broker is idle again, with the disk's own
fdatasync latency (p50/p99 of 4 KiB write + sync, just before: the floor under it); the official wheel's
rates beside them; standalone ready time and resident memory (idle at start, the peak of
each phase and of all, and settled after each pass: ``--repeat N`` runs the matrix N times
on new topics against the same standalone, so growth across passes shows). Usage::

    python benchmarks/broker.py [--seconds S] [--sizes 100,1024] [--partitions 1,4]
        [--modes unbatched,batched,latency] [--wheel-messages N] [--repeat N] [--profile DIR]
        [--compare-to TREE [--rounds N]] [--latency-rate MSG_PER_S] [--nats] [--pulsar-lite]

Writes ``benchmarks/results/broker.json``. With ``--compare-to`` (a checkout's directory, or
a commit of this repository, exported with ``git archive``) the standalone of that tree and
this one's run the matrix in turn, ``--rounds`` times each (old, new, old, new, ...: a
shared machine's drift hits both alike; the latency runs of both use the rate of the first
pass); it prints a before/after table of the medians with their ratio and writes
``benchmarks/results/broker-compare.json`` (every pass's figures too). Both trees run on
this virtualenv's interpreter and packages. ``--nats`` also runs the issue's peer, NATS
JetStream (``nats_peer.py``: the same window of unbatched 100 B publishes, end to end), once
per pass, and prints Magnetar's unbatched and batched rates as ratios to it. ``--pulsar-lite``
measures a fresh pulsar-lite's publish latency (``peers.py``; it acknowledges without an
fsync) at the rate of each latency run, once per pass.

``--modes latency --latency-rate 37500 --compare-to TREE --rounds N`` measures publish
latency alone, on a fresh standalone each pass (once its start-up work is done), the two
trees alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import uvloop
from nats_peer import measure_nats  # this directory: the script's own
from peers import PulsarLite
from raw_generator import BATCH, PAYLOAD, SendFrames, entry_for, run_raw

from magnetar.bookie.gc_tuning import tune_gc_for_serving
from magnetar.testing import StandaloneProcess

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def sys_cpu_s(pid: int) -> float:
    """The kernel's share of :func:`cpu_s` (system calls, loopback TCP, page faults)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / CLK_TCK


def wait_quiet(pid: int, timeout_s: float = 30.0) -> None:
    """Until the broker has been (nearly) idle for half a second: the storage work a
    maximum-rate run leaves behind (checkpoints, ledger roll-overs) is done, so the latency
    run measures the broker at the rate asked, not the tail of the previous run."""
    deadline = time.monotonic() + timeout_s
    before = cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_s(pid)
        if now - before < 0.05:  # under 10% of a core
            return
        before = now


def disk_sync_ms(directory: Path, seconds: float = 1.0) -> dict[str, float]:
    """The disk's own floor under publish latency, measured beside it: ``seconds`` of 4 KiB
    writes each followed by an fdatasync, 1 ms apart, into a zero-filled file in
    ``directory`` (as the journal writes its preallocated files); p50 and p99 in ms. A
    receipt waits for at least one such sync, and for the one in flight when its SEND came:
    on a shared virtual disk whose p99 is milliseconds, that bounds the publish p99 from
    below whatever the broker does."""
    path = directory / "disk-sync-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, bytes(8 * 1024 * 1024))
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        block = b"x" * 4096
        syncs: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and len(syncs) < 2000:  # 8 MiB
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            syncs.append(time.perf_counter() - t0)
            time.sleep(0.001)
    finally:
        os.close(fd)
        path.unlink()
    syncs.sort()
    return {
        "p50": syncs[len(syncs) // 2] * 1000,
        "p99": syncs[int(len(syncs) * 0.99) - 1] * 1000,
    }


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the standalone's journal writer among them)."""
    out = [pid]
    for parent in out:
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                out.extend(int(c) for c in children.read_text().split())
            except OSError:  # the thread or process ended meanwhile
                continue
    return out


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of ``pid`` (``VmHWM``: its peak so far) plus what its descendants
    (the journal's writer process) hold of their own: their anonymous resident memory. The
    interpreter's file pages they map are the ones ``pid`` maps, counted once."""
    total_kb = _status_kb(pid, field)
    for child in process_tree(pid)[1:]:
        total_kb += _status_kb(child, "RssAnon")
    return total_kb / 1024


def _status_kb(pid: int, field: str) -> int:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # it ended meanwhile
        return 0
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def settled_rss_mb(pid: int, timeout_s: float = 30.0) -> float:
    """Resident memory once it stops falling (caches drained, freed heap returned by the
    standalone's trimmer): two readings a second apart within 2 % of each other."""
    deadline = time.monotonic() + timeout_s
    last = rss_mb(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss_mb(pid)
        if now >= last * 0.98:
            return now
        last = now
    return last


def run_wheel(url: str, n: int) -> dict[str, float]:
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=30)
    out: dict[str, float] = {}
    for batching in (False, True):
        key = "batched" if batching else "unbatched"
        topic = f"wheel-{key}-{time.time_ns()}"
        consumer = client.subscribe(topic, "bench", receiver_queue_size=1000)
        producer = client.create_producer(
            topic, batching_enabled=batching, max_pending_messages=5000, block_if_queue_full=True,
            batching_max_messages=BATCH,
        )  # fmt: skip
        t0 = time.perf_counter()
        for _ in range(n):
            producer.send_async(PAYLOAD, None)
        producer.flush()
        out[f"wheel_produce_{key}_msg_per_s"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n):
            consumer.acknowledge(consumer.receive(10_000))
        out[f"wheel_consume_{key}_msg_per_s"] = n / (time.perf_counter() - t0)
    client.close()
    return out


def py_spy_path() -> Path:
    """The ``py-spy`` beside this interpreter (``--profile`` records with it; it is not one
    of the project's dependencies: ``pip install py-spy`` into the same environment)."""
    return Path(sys.executable).parent / "py-spy"


def start_profile(directory: Path | None, pid: int, name: str) -> subprocess.Popen[bytes] | None:
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(py_spy_path()), "record", "--pid", str(pid), "--format", "raw", "--threads", "--nonblocking", "--rate", "400",
         "-o", str(directory / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def create_partitioned(http_url: str, topic: str, partitions: int) -> list[str]:
    """The partition topics of a new partitioned topic (created through the admin API)."""
    if partitions == 1:
        return [topic]
    url = f"{http_url}/admin/v2/persistent/public/default/{topic}/partitions"
    request = urllib.request.Request(url, data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    urllib.request.urlopen(request, timeout=30).close()
    return [f"persistent://public/default/{topic}-partition-{i}" for i in range(partitions)]


def reset_peak_rss(pid: int) -> bool:
    """Start ``VmHWM`` over from the current resident size (``clear_refs`` 5), so the next
    reading is the peak of the next phase only; False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def run_matrix(
    args: argparse.Namespace, node: StandaloneProcess, pid: int, suffix: str, tag: str
) -> dict[str, float]:
    """One pass of the matrix against ``node`` (topic names end in ``suffix``, so a repeated
    pass makes new topics, as a long-lived broker sees); adds each phase's peak resident
    memory as ``standalone_rss_mb_peak_<phase>``. ``tag`` ends the names of its profiles."""
    modes = set(args.modes.split(","))
    sizes = [int(x) for x in args.sizes.split(",")]
    partition_counts = [int(x) for x in args.partitions.split(",")]
    results: dict[str, float] = {}
    peaks_known = reset_peak_rss(pid)

    def phase_peak(key: str) -> None:
        if peaks_known:
            results[f"standalone_rss_mb_peak_{key}"] = rss_mb(pid, "VmHWM")
            reset_peak_rss(pid)

    # Unbatched runs and the latency runs first, batched last: a batched run writes
    # gigabytes, and the disk is still busy with them for a while after it ends.
    for kind in ("unbatched", "batched"):
        latency_too = kind == "unbatched" and "latency" in modes
        if kind not in modes and not latency_too:
            continue
        for size in sizes:
            frames = SendFrames(*entry_for(size, kind == "batched"))
            for partitions in partition_counts if kind in modes else ():
                key = f"{kind}_{size}B_{partitions}p"
                topics = create_partitioned(node.http_url, f"raw-{key}{suffix}", partitions)
                c0 = cpu_s(pid)
                s0 = sys_cpu_s(pid)
                spy = start_profile(args.profile, pid, key + tag)
                r = uvloop.run(run_raw(node.port, topics, frames, args.seconds))
                stop_profile(spy)
                results[f"{key}_produce_msg_per_s"] = r["produce_msg_per_s"]
                results[f"{key}_consume_msg_per_s"] = r["consume_msg_per_s"]
                results[f"{key}_broker_cpu_us_per_msg"] = (cpu_s(pid) - c0) / r["messages"] * 1e6
                results[f"{key}_broker_sys_cpu_us_per_msg"] = (
                    (sys_cpu_s(pid) - s0) / r["messages"] * 1e6
                )
                results[f"{key}_generator_cpu_us_per_msg"] = r["generator_cpu_us_per_msg"]
                phase_peak(key)
            half_key = f"unbatched_{size}B_1p_produce_msg_per_s"
            if latency_too and (size in args.latency_rate or half_key in results):
                # --latency-rate, or with --compare-to both trees at the same rate: half the
                # first maximum measured (args.latency_rate), else half of this run's
                half = args.latency_rate.get(size) or results[half_key] / 2
                key = f"latency_{size}B"
                wait_quiet(pid)
                for q, ms in disk_sync_ms(node.data_dir).items():
                    results[f"{key}_disk_fdatasync_{q}_ms"] = ms
                r = uvloop.run(
                    run_raw(node.port, [f"raw-{key}{suffix}"], frames, args.seconds, half)
                )
                results[f"{key}_rate_msg_per_s"] = half
                for q in ("p50", "p99", "p999"):
                    results[f"{key}_publish_{q}_ms"] = r[f"publish_latency_{q}_ms"]
                phase_peak(key)
    if args.wheel_messages:
        results.update(run_wheel(node.url, args.wheel_messages))
        phase_peak("wheel")
    return results


def start_standalone(data_dir: Path, src: Path | None) -> StandaloneProcess:
    """A started standalone over ``data_dir`` running the ``src`` directory of another
    source tree (None: this one's)."""
    node = StandaloneProcess(data_dir)
    saved_path = os.environ.get("PYTHONPATH")
    if src is not None:  # ahead of the editable install's path entry
        os.environ["PYTHONPATH"] = str(src)
    try:
        node.start()
    finally:
        if src is not None:
            if saved_path is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved_path
    return node


def measure(args: argparse.Namespace, src: Path | None) -> dict[str, float]:
    """``--repeat`` passes of the selected matrix against one fresh standalone; ``src`` is
    the ``src`` directory of another source tree to run the standalone from (None: this
    one)."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        node = start_standalone(Path(tmp) / "data", src)
        results["standalone_ready_s"] = time.perf_counter() - t0
        assert node.proc is not None
        pid = node.proc.pid
        results["standalone_rss_mb_idle"] = rss_mb(pid)
        # The start-up's tail (the functions worker's election, the admin API's first
        # request building its routes) is not the broker's per-message cost.
        wait_quiet(pid)
        tree = "" if src is None else "-before"
        peak_mb = 0.0
        try:
            for run in range(1, args.repeat + 1):
                # The first pass's figures keep their plain names; later passes add _run<N>.
                tag = "" if run == 1 else f"_run{run}"
                figures = run_matrix(args, node, pid, tag.replace("_", "-"), tag + tree)
                results.update({f"{k}{tag}": v for k, v in figures.items()})
                peak_mb = max(
                    [peak_mb, rss_mb(pid, "VmHWM")]
                    + [v for k, v in figures.items() if k.startswith("standalone_rss_mb_peak_")]
                )
                wait_quiet(pid)
                results[f"standalone_rss_mb_settled_run{run}"] = settled_rss_mb(pid)
            results["standalone_rss_mb_peak"] = peak_mb
            results["standalone_rss_mb_settled"] = results[
                f"standalone_rss_mb_settled_run{args.repeat}"
            ]
        finally:
            node.stop()
    return results


def byte_compile(src: Path) -> None:
    """Writes the ``.pyc`` of every module under ``src`` (whatever
    ``PYTHONDONTWRITEBYTECODE`` says), so its processes read them as an installed package's
    would: a module imported after start-up is not compiled from source in a measured phase."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", str(src / "magnetar")],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def source_tree(spec: str, tmp: Path) -> Path:
    """The ``src`` directory of ``spec``, byte-compiled, and this checkout's ``src`` compiled
    too, so both trees start alike: a checkout (a directory holding ``src/magnetar``) or a
    commit of this repository, exported to ``tmp`` with ``git archive``."""
    repo = Path(__file__).resolve().parent.parent
    byte_compile(repo / "src")
    given = Path(spec)
    if (given / "src" / "magnetar").is_dir():
        byte_compile(given / "src")
        return (given / "src").resolve()
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", spec, "src"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
    except subprocess.CalledProcessError as exc:
        raise SystemExit(
            f"--compare-to {spec}: neither a checkout nor a commit ({exc.stderr.decode().strip()})"
        ) from None
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    if (tmp / "src" / "magnetar" / "protocol" / "_cframe.c").exists():
        build_c_codec(repo, spec, tmp)
    byte_compile(tmp / "src")
    return tmp / "src"


def build_c_codec(repo: Path, spec: str, tmp: Path) -> None:
    """Builds the commit's optional C codec in place, as ``pip install`` would, so the old
    tree runs the same codec a user's install of it would."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        blob = subprocess.run(
            ["git", "-C", str(repo), "show", f"{spec}:{name}"], check=True, capture_output=True
        ).stdout
        (tmp / name).write_bytes(blob)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp, check=True, capture_output=True,
    )  # fmt: skip


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compare(args: argparse.Namespace) -> dict[str, object]:
    """``--rounds`` passes of the matrix against the old tree and this one, alternating
    (old, new, old, new, ...: drift of a shared machine hits both alike); prints each
    figure's median for both and the ratio of the medians."""
    before: list[dict[str, float]] = []
    after: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        src = source_tree(args.compare_to, Path(tmp))
        for i in range(args.rounds):
            for label, tree, runs in (("before", src, before), ("after", None, after)):
                print(f"round {i + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
                runs.append(measure(args, tree))
                if args.nats:
                    runs[-1].update(nats_figures(args, runs[-1]))
                if args.pulsar_lite:
                    runs[-1].update(pulsar_lite_figures(args, runs[-1]))
                if not args.latency_rate:  # one rate for both trees, from the first run
                    sizes = [int(x) for x in args.sizes.split(",")]
                    for size in sizes:
                        key = f"unbatched_{size}B_1p_produce_msg_per_s"
                        if key in runs[-1]:
                            args.latency_rate[size] = runs[-1][key] / 2
    keys = [k for k in after[0] if all(k in r for r in before + after)]
    heading = f"figure (median of {args.rounds} rounds)"
    print(f"{heading:44} {'before':>12} {'after':>12} {'after/before':>13}")
    table: dict[str, object] = {"compare_to": args.compare_to, "rounds": args.rounds}
    for k in keys:
        b = median([r[k] for r in before])
        a = median([r[k] for r in after])
        ratio = a / b if b else float("nan")
        print(f"{k:44} {b:12.3f} {a:12.3f} {ratio:13.2f}")
        table[k] = {"before": b, "after": a, "before_runs": [r[k] for r in before],
                    "after_runs": [r[k] for r in after]}  # fmt: skip
    return table


def nats_figures(args: argparse.Namespace, results: dict[str, float]) -> dict[str, float]:
    """NATS JetStream's unbatched rate (first size) measured now, and Magnetar's rates of
    ``results`` (one partition) as ratios to it."""
    size = int(args.sizes.split(",")[0])
    nats = measure_nats(args.seconds, size)
    base = nats["nats_unbatched_produce_msg_per_s"]
    for kind in ("unbatched", "batched"):
        key = f"{kind}_{size}B_1p_produce_msg_per_s"
        if key in results:
            nats[f"{kind}_{size}B_1p_produce_vs_nats"] = results[key] / base
    return nats


def pulsar_lite_figures(args: argparse.Namespace, results: dict[str, float]) -> dict[str, float]:
    """pulsar-lite's publish latency at the rate of each latency run in ``results``, on a
    fresh pulsar-lite each (PyPI's Rust broker; it acknowledges without an fsync), with the
    same generator and duration, producing only: its consumer falls behind at these rates
    and would not drain (Magnetar's latency runs are consumed as they go, so the peer's
    figure is the easier of the two)."""
    figures: dict[str, float] = {}
    for size in (int(x) for x in args.sizes.split(",")):
        key = f"latency_{size}B"
        rate = results.get(f"{key}_rate_msg_per_s")
        if rate is None:
            continue
        frames = SendFrames(*entry_for(size, False))
        with PulsarLite() as peer:
            r = uvloop.run(
                run_raw(peer.port, [f"raw-{key}"], frames, args.seconds, rate, consume=False)
            )
        for q in ("p50", "p99", "p999"):
            figures[f"pulsar_lite_{key}_publish_{q}_ms"] = r[f"publish_latency_{q}_ms"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--wheel-messages", type=int, default=20_000, help="0: skip the wheel")
    parser.add_argument("--sizes", default="100,1024", help="message sizes in bytes")
    parser.add_argument("--partitions", default="1,4", help="partition counts")
    parser.add_argument(
        "--modes",
        default="batched,unbatched,latency",
        help="comma-separated subset: batched, unbatched (maximum rates), latency (at half "
        "the maximum unbatched rate, one partition; alone, at --latency-rate on a fresh "
        "standalone)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes of the matrix against the same standalone, each on new topics; the "
        "settled resident memory after each (standalone_rss_mb_settled_run<N>) shows growth",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="record the broker with py-spy during each raw run (collapsed stacks in this dir)",
    )
    parser.add_argument(
        "--compare-to",
        default=None,
        metavar="TREE",
        help="also run the standalone of another source tree (a checkout's directory, or a "
        "commit of this repository), alternating with this one, and print both side by side",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="with --compare-to: passes of each tree"
    )
    parser.add_argument(
        "--nats",
        action="store_true",
        help="also measure NATS JetStream (nats-server -js) unbatched, in the same run, and "
        "print Magnetar's rates as ratios to it",
    )
    parser.add_argument(
        "--pulsar-lite",
        action="store_true",
        help="also measure pulsar-lite's publish latency (a fresh one, PyPI's pulsar-lite) at "
        "each latency run's rate, in the same pass",
    )
    parser.add_argument(
        "--latency-rate",
        dest="fixed_latency_rate",
        type=float,
        default=None,
        metavar="MSG_PER_S",
        help="measure publish latency at this rate (every size) instead of half the maximum "
        "unbatched rate measured (with --compare-to: half the first tree's first maximum)",
    )
    args = parser.parse_args()
    if args.profile is not None and not py_spy_path().exists():
        parser.error(
            f"--profile needs py-spy in this environment ({py_spy_path()}): pip install py-spy"
        )
    modes = set(args.modes.split(","))
    if "latency" in modes and "unbatched" not in modes and args.fixed_latency_rate is None:
        parser.error("--modes latency without unbatched needs --latency-rate")
    args.latency_rate = {}  # per size; filled from the first run unless fixed
    if args.fixed_latency_rate is not None:
        args.latency_rate = {int(x): args.fixed_latency_rate for x in args.sizes.split(",")}
    tune_gc_for_serving()  # the generator's per-message objects too: off the collector
    out = Path(__file__).parent / "results" / "broker.json"
    out.parent.mkdir(exist_ok=True)
    if args.compare_to is not None:
        table = compare(args)
        out.with_name("broker-compare.json").write_text(json.dumps(table, indent=2) + "\n")
        return
    results = measure(args, None)
    if args.nats:
        results.update(nats_figures(args, results))
    if args.pulsar_lite:
        results.update(pulsar_lite_figures(args, results))
    for k, v in results.items():
        print(f"{k:44} {v:14.3f}")
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
