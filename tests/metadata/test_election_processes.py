"""Leader election with epochs among three candidate processes on a real ZooKeeper:
SIGKILL fail-over, SIGSTOP past the session timeout (the stale leader is deposed and fenced),
and the invariants checked from each process's log and from the fenced writes themselves."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.metadata import MetadataStore, NotFound, connect
from magnetar.testing import wait_until_async

CANDIDATE = Path(__file__).with_name("candidate.py")
SESSION_TIMEOUT_S = 2.0
WAIT_S = 30.0


@dataclass
class Candidate:
    cid: str
    log: Path
    process: asyncio.subprocess.Process

    def lines(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines() if line.strip()]

    def events(self, name: str) -> list[list[str]]:
        return [parts for parts in self.lines() if len(parts) > 1 and parts[1] == name]


class Cluster:
    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.candidates: dict[str, Candidate] = {}

    async def spawn(self, cid: str) -> Candidate:
        log = self.directory / f"{cid}.log"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CANDIDATE),
            self.url,
            cid,
            str(log),
            str(SESSION_TIMEOUT_S),
            stdin=asyncio.subprocess.DEVNULL,
            stderr=open(self.directory / f"{cid}.stderr", "wb"),  # noqa: SIM115
        )
        candidate = Candidate(cid, log, process)
        self.candidates[cid] = candidate
        return candidate

    async def kill_all(self) -> None:
        for candidate in self.candidates.values():
            if candidate.process.returncode is None:
                with_cont = [signal.SIGCONT, signal.SIGKILL]
                for sig in with_cont:
                    try:
                        candidate.process.send_signal(sig)
                    except ProcessLookupError:
                        break
                await candidate.process.wait()


@pytest.fixture
async def cluster(zookeeper_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    store = await connect(zookeeper_url)
    await store.put("/writes", b"")
    await store.close()
    cluster = Cluster(zookeeper_url, tmp_path)
    try:
        yield cluster
    finally:
        await cluster.kill_all()


async def leader_of(store: MetadataStore) -> tuple[str, int] | None:
    try:
        leader = await store.get("/controller")
        epoch = await store.get("/controller_epoch")
    except NotFound:
        return None
    return leader.value.decode(), epoch.stat.version


async def test_three_processes_failover_and_fencing(cluster: Cluster) -> None:
    observer = await connect(cluster.url, session_timeout_s=10.0)
    try:
        for cid in ("c1", "c2", "c3"):
            await cluster.spawn(cid)
        current: tuple[str, int] | None = None

        async def elected() -> bool:
            nonlocal current
            current = await leader_of(observer)
            return current is not None and bool(cluster.candidates[current[0]].events("WRITE_OK"))

        await wait_until_async(elected, WAIT_S, what="a first leader")
        assert current is not None
        epochs_seen = [current[1]]

        # 1. SIGKILL the leader: a new one within session timeout + 1 s
        loop = asyncio.get_running_loop()
        victim = cluster.candidates[current[0]]
        killed_at = loop.time()
        victim.process.send_signal(signal.SIGKILL)
        await victim.process.wait()
        previous = current

        async def replaced() -> bool:
            nonlocal current
            current = await leader_of(observer)
            return current is not None and current[0] != previous[0]

        await wait_until_async(replaced, SESSION_TIMEOUT_S + 5, what="a leader after SIGKILL")
        failover_s = loop.time() - killed_at
        assert failover_s < SESSION_TIMEOUT_S + 1.0, failover_s
        assert current is not None and current[1] > previous[1]
        epochs_seen.append(current[1])
        await cluster.spawn("c4")  # keep three candidates

        # 2. SIGSTOP the leader past its session timeout, then resume it
        stopped = cluster.candidates[current[0]]
        stopped_epoch = current[1]
        stopped.process.send_signal(signal.SIGSTOP)
        previous = current
        await wait_until_async(replaced, SESSION_TIMEOUT_S + 10, what="a leader after SIGSTOP")
        assert current is not None and current[1] > stopped_epoch
        epochs_seen.append(current[1])
        new_leader = cluster.candidates[current[0]]
        await wait_until_async(
            lambda: new_leader.events("WRITE_OK"), WAIT_S, what="writes by the new leader"
        )
        stopped.process.send_signal(signal.SIGCONT)
        await wait_until_async(
            lambda: stopped.events("STALE_NEW_SESSION_REJECTED"),
            WAIT_S,
            what="the resumed leader deposed",
        )
        deposed = stopped.events("DEPOSED")
        assert deposed and deposed[-1][2:] == [str(stopped_epoch), "LOST"], deposed
        stale = stopped.events("STALE_WRITE_REJECTED")
        assert stale and stale[-1][3] == "SessionExpired", stale
        assert stopped.events("STALE_NEW_SESSION_REJECTED")[-1][3] == "FencedByEpoch"
        assert not stopped.events("STALE_WRITE_ACCEPTED")
        assert not stopped.events("STALE_NEW_SESSION_ACCEPTED")
        leader_lines = stopped.events("LEADER")
        assert leader_lines[-1][2] == str(stopped_epoch)

        # 3. invariants from the logs and from the store
        await cluster.kill_all()
        leaders: dict[int, set[str]] = {}
        timeline: list[tuple[float, int]] = []
        for candidate in cluster.candidates.values():
            for parts in candidate.events("LEADER"):
                leaders.setdefault(int(parts[2]), set()).add(candidate.cid)
                timeline.append((float(parts[0]), int(parts[2])))
        assert all(len(ids) == 1 for ids in leaders.values()), leaders
        timeline.sort()
        assert [e for _, e in timeline] == sorted({e for _, e in timeline}), timeline
        assert set(epochs_seen) <= set(leaders)
        # the fenced writes, in the store's order: epochs never go back, each by its leader
        names = await observer.children("/writes")
        written = [(await observer.get(f"/writes/{n}")).value.decode().split(":") for n in names]
        assert written, "no fenced write landed"
        write_epochs = [int(e) for _, e in written]
        assert write_epochs == sorted(write_epochs)
        assert all(leaders[int(e)] == {cid} for cid, e in written)
        assert str(stopped_epoch) not in {
            e for _, e in written[write_epochs.index(epochs_seen[-1]) :]
        }
    finally:
        await observer.close()
