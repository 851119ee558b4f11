"""The simulated time, network and disk of :mod:`magnetar.testing.simulation`."""

from __future__ import annotations

import asyncio
import errno
import random

import pytest

from magnetar.metadata import ConnectionLoss, SessionExpired, SessionState, connect
from magnetar.testing.simulation import (
    LoopClock,
    SimulatedDisk,
    SimulatedLoop,
    SimulatedNetwork,
    SimulationStuck,
)
from magnetar.testing.simulation.metadata import UnreliableStore
from magnetar.testing.simulation.stream import open_stream


def run(coro_factory):  # type: ignore[no-untyped-def]
    loop = SimulatedLoop()
    try:
        return loop, loop.run_until_complete(coro_factory(loop))
    finally:
        loop.close()


def test_the_loop_jumps_to_the_next_timer() -> None:
    async def main(loop: SimulatedLoop) -> list[tuple[str, float]]:
        seen: list[tuple[str, float]] = []
        clock = LoopClock(loop)
        clock.call_later(3600, lambda: seen.append(("timer", loop.time())))
        await asyncio.sleep(10)
        seen.append(("slept", clock.monotonic_s()))
        await asyncio.wait_for(asyncio.sleep(7200), timeout=None)
        return seen

    loop, seen = run(main)
    assert seen == [("slept", 10.0), ("timer", 3600.0)]
    assert loop.time() == 7210.0


def test_executor_jobs_run_inline_and_a_deadlock_is_reported() -> None:
    async def main(loop: SimulatedLoop) -> int:
        assert await loop.run_in_executor(None, sum, [1, 2]) == 3
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(None, divmod, 1, 0)
        await loop.create_future()  # nothing will ever complete it
        return 0

    with pytest.raises(SimulationStuck):
        run(main)


def test_a_link_delivers_in_order_and_holds_messages_across_a_partition() -> None:
    async def main(loop: SimulatedLoop) -> tuple[list[int], list[int]]:
        net = SimulatedNetwork(loop, random.Random(1))
        link = net.link("a", "b")
        got: list[int] = []
        for i in range(20):
            link.send(lambda i=i: got.append(i))  # type: ignore[misc]
        await asyncio.sleep(1)
        net.partition("a", "b")
        assert not net.connected("a", "b") and net.connected("a", "c")
        link.send(lambda: got.append(20))
        await asyncio.sleep(5)
        before_heal = list(got)
        net.heal("a", "b")
        await asyncio.sleep(1)
        return before_heal, got

    _, (before_heal, got) = run(main)
    assert before_heal == list(range(20))
    assert got == list(range(21))


def test_a_cut_link_delivers_nothing_more() -> None:
    async def main(loop: SimulatedLoop) -> list[int]:
        net = SimulatedNetwork(loop, random.Random(2))
        link = net.link("a", "b")
        got: list[int] = []
        link.send(lambda: got.append(1))
        link.cut()
        link.send(lambda: got.append(2))
        await asyncio.sleep(1)
        return got

    _, got = run(main)
    assert got == []


def test_a_crash_keeps_what_was_synced() -> None:
    rng = random.Random(3)
    for _ in range(50):
        disk = SimulatedDisk(1024)
        disk.write(b"synced")
        disk.sync()
        disk.write(b"-not-synced")
        left = disk.crash(rng)
        assert left.startswith(b"synced") and b"synced-not-synced".startswith(left)


def test_a_disk_that_lies_about_syncs_loses_them_until_written_back() -> None:
    disk = SimulatedDisk(1024, sync_lies=True)
    disk.write(b"acknowledged")
    disk.sync()
    assert disk.durable_bytes == 0
    disk.write_back()
    assert disk.durable_bytes == len(b"acknowledged")


def test_a_full_disk_refuses_writes_until_freed() -> None:
    disk = SimulatedDisk(8)
    with pytest.raises(OSError) as full:
        disk.write(b"123456789")
    assert full.value.errno == errno.ENOSPC
    disk.fill()
    with pytest.raises(OSError):
        disk.write(b"1")
    disk.free()
    disk.write(b"1")
    assert disk.written == b"1"


def test_files_start_where_a_restart_began_a_new_one() -> None:
    disk = SimulatedDisk(1024)
    disk.write(b"first")
    disk.sync()
    disk.new_file()
    disk.write(b"second")
    disk.sync()
    assert disk.files() == [b"first", b"second"]
    disk.write(b"torn")
    disk.crash(random.Random(4))
    assert disk.files()[0] == b"first" and disk.files()[1].startswith(b"second")


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.lost: list[str] = []

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(type(exc).__name__ if exc else "closed")


def test_a_stream_delivers_bytes_in_order_then_the_close_and_a_reset_cuts_both_ends() -> None:
    async def main(loop: SimulatedLoop) -> None:
        net = SimulatedNetwork(loop, random.Random(3))
        client, server = Recorder(), Recorder()
        transport = open_stream(net, "c", client, "s", server)
        for i in range(50):
            transport.write(b"%d," % i)
        net.partition("c", "s")
        transport.write(b"held,")
        await asyncio.sleep(1)
        assert server.data == b"".join(b"%d," % i for i in range(50))
        net.heal("c", "s")
        transport.close()
        await asyncio.sleep(1)
        assert server.data.endswith(b"held,")
        assert server.lost == ["closed"] and client.lost == ["closed"]

        client, server = Recorder(), Recorder()
        transport = open_stream(net, "c", client, "s", server)
        transport.write(b"lost")
        transport.reset()
        await asyncio.sleep(1)
        assert server.data == b""
        assert client.lost == server.lost == ["ConnectionResetError"]

    run(main)


def test_an_unreliable_store_loses_its_connection_and_its_session() -> None:
    async def main(loop: SimulatedLoop) -> None:
        inner = await connect("memory:", clock=LoopClock(loop))
        store = UnreliableStore(inner, random.Random(5))
        await store.put("/a", b"1")
        store.unreachable = True
        with pytest.raises(ConnectionLoss):
            await store.get("/a")
        applied = 0
        for i in range(20):  # a lost write's outcome is unknown: some were applied
            with pytest.raises(ConnectionLoss):
                await store.put(f"/w{i}", b"")
            applied += await inner.exists(f"/w{i}") is not None
        assert 0 < applied < 20
        store.unreachable = False
        assert (await store.get("/a")).value == b"1"
        store.expire()
        with pytest.raises(SessionExpired):
            await store.get("/a")
        assert store.session_state is SessionState.LOST
        await inner.close()

    run(main)
