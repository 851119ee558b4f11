"""Two controller candidate processes (``controller_candidate.py``) on a real ZooKeeper:
the controller SIGKILLed, and the controller SIGSTOPped past its session timeout and
resumed. The states are checked from each process's log and from the store itself."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.metadata import MetadataStore, connect
from magnetar.testing import wait_until_async

CANDIDATE = Path(__file__).with_name("controller_candidate.py")
SESSION_TIMEOUT_S = 2.0
WAIT_S = 30.0
BUNDLE_T = "public/default/0x80000000_0xc0000000"


class Candidate:
    def __init__(self, broker_id: str, log: Path, process: asyncio.subprocess.Process) -> None:
        self.broker_id = broker_id
        self.log = log
        self.process = process

    def events(self, name: str) -> list[list[str]]:
        if not self.log.exists():
            return []
        lines = [line.split() for line in self.log.read_text().splitlines()]
        return [parts[2:] for parts in lines if len(parts) > 1 and parts[1] == name]

    def times(self, name: str) -> list[float]:
        lines = [line.split() for line in self.log.read_text().splitlines()]
        return [float(parts[0]) for parts in lines if len(parts) > 1 and parts[1] == name]


class Processes:
    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.started: list[Candidate] = []

    async def spawn(self, broker_id: str) -> Candidate:
        log = self.directory / f"{broker_id}.log"
        with open(self.directory / f"{broker_id}.stderr", "wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(CANDIDATE),
                self.url,
                broker_id,
                str(log),
                str(SESSION_TIMEOUT_S),
                stdin=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        candidate = Candidate(broker_id, log, process)
        self.started.append(candidate)
        return candidate

    async def stop_all(self) -> None:
        for candidate in self.started:
            if candidate.process.returncode is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        candidate.process.send_signal(sig)
                    except ProcessLookupError:
                        break
                await candidate.process.wait()


@pytest.fixture
async def registry(zookeeper_url: str) -> AsyncIterator[MetadataStore]:
    """The brokers' registrations (b1, b2), held by this test's session."""
    store = await connect(zookeeper_url, session_timeout_s=SESSION_TIMEOUT_S)
    for broker in ("b1", "b2"):
        await store.create(f"/loadbalance/brokers/{broker}", b"", ephemeral=True)
    yield store
    await store.close()


@pytest.fixture
async def processes(zookeeper_url: str, tmp_path: Path) -> AsyncIterator[Processes]:
    procs = Processes(zookeeper_url, tmp_path)
    try:
        yield procs
    finally:
        await procs.stop_all()


async def leader_of(*candidates: Candidate) -> Candidate | None:
    def one() -> Candidate | None:
        return next((c for c in candidates if c.events("LEADER")), None)

    return await wait_until_async(one, WAIT_S, what="a controller elected")


async def test_sigkilled_controller_is_replaced_and_its_states_resumed(
    registry: MetadataStore, processes: Processes
) -> None:
    a = await processes.spawn("ctl-a")
    assert await leader_of(a) is a
    await wait_until_async(lambda: a.events("READY"), WAIT_S, what="a ready")
    b = await processes.spawn("ctl-b")
    await wait_until_async(lambda: b.events("CAMPAIGN"), WAIT_S, what="b campaigning")
    epoch_a = int(a.events("LEADER")[0][0])
    a.process.send_signal(signal.SIGKILL)
    await a.process.wait()
    await wait_until_async(lambda: b.events("LEADER"), WAIT_S, what="b elected")
    epoch_b = int(b.events("LEADER")[0][0])
    assert epoch_b > epoch_a
    states = {
        s[0]: (s[1], s[2], int(s[3]))
        for s in b.events("STATE")
        if s[0].startswith("public/default/")
    }
    # ctl-a acknowledged the first two assignments; the other two were in flight
    assert states == {
        "public/default/0x00000000_0x40000000": ("Owned", "b1", epoch_a),
        "public/default/0x40000000_0x80000000": ("Owned", "b2", epoch_a),
        BUNDLE_T: ("Assigning", "b1", epoch_b),
        "public/default/0xc0000000_0xffffffff": ("Assigning", "b2", epoch_b),
    }
    assert [c[:2] for c in b.events("COMMAND") if c[1].startswith("public/")] == [
        ["AssignBundle", BUNDLE_T],
        ["AssignBundle", "public/default/0xc0000000_0xffffffff"],
    ]
    await wait_until_async(lambda: b.events("WRITE_OK"), WAIT_S, what="b writes")


async def test_controller_stopped_past_its_session_cannot_change_anything(
    registry: MetadataStore, processes: Processes
) -> None:
    a = await processes.spawn("ctl-a")
    assert await leader_of(a) is a
    await wait_until_async(lambda: len(a.events("WRITE_OK")) >= 3, WAIT_S, what="a writes")
    b = await processes.spawn("ctl-b")
    await wait_until_async(lambda: b.events("CAMPAIGN"), WAIT_S, what="b campaigning")
    a.process.send_signal(signal.SIGSTOP)
    await wait_until_async(lambda: b.events("LEADER"), WAIT_S, what="b elected")
    epoch_a, epoch_b = int(a.events("LEADER")[0][0]), int(b.events("LEADER")[0][0])
    assert epoch_b > epoch_a
    a.process.send_signal(signal.SIGCONT)
    rejected = await wait_until_async(
        lambda: a.events("WRITE_REJECTED"), WAIT_S, what="a's change refused"
    )
    assert rejected[0][1] == "ControllerDeposed"
    # nothing ctl-a changed after ctl-b won: every namespace stored at a's epoch was
    # already there when b resumed (b logged its bundle), and a attempted it
    seen_by_b = {s[0].split("/")[1] for s in b.events("STATE") if s[0].startswith("ctl-a/")}
    attempted = {f"n{w[0]}" for w in a.events("WRITE_OK") + a.events("WRITE_REJECTED")}
    stored_by_a = set()
    for name in await registry.children("/controller_state/namespaces"):
        body = json.loads((await registry.get(f"/controller_state/namespaces/{name}")).value)
        if name.startswith("ctl-a"):
            assert body["epoch"] == epoch_a
            stored_by_a.add(name.rsplit("%2F", 1)[1])
    assert len(stored_by_a) >= 3
    assert stored_by_a <= seen_by_b and stored_by_a <= attempted
    # b resumed a's namespaces and goes on changing things at its epoch
    await wait_until_async(lambda: b.events("WRITE_OK"), WAIT_S, what="b writes")
