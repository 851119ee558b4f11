"""Embedded-backend specifics: durability across reopen, sharing, one process per file."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.common.errors import MetadataError
from magnetar.metadata import connect
from magnetar.metadata.store import BadVersion, EventType, NodeExists


async def test_reopen_keeps_persistent_nodes_and_drops_ephemeral(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'meta.db'}"
    store = await connect(url)
    await store.put("/ledgers/1", b"meta-1")
    await store.create("/ledgers/2", b"meta-2")
    await store.create("/bookies/available/b1", b"", ephemeral=True)
    seq = await store.create("/q/n-", b"", sequential=True)
    await store.close()
    reopened = await connect(url)
    assert (await reopened.get("/ledgers/1")).value == b"meta-1"
    assert await reopened.children("/ledgers") == ["1", "2"]
    assert await reopened.children("/bookies/available") == []
    # sequence numbers never repeat after a reopen
    assert await reopened.create("/q/n-", b"", sequential=True) > seq
    await reopened.close()


def test_crashed_process_leaves_no_ephemeral_nodes(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    script = (
        "import asyncio, os\n"
        "from magnetar.metadata import connect\n"
        "async def main():\n"
        f"    s = await connect('sqlite://{db}')\n"
        "    await s.put('/kept', b'yes')\n"
        "    await s.create('/eph', b'', ephemeral=True)\n"
        "    os._exit(0)  # die without closing the session\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    check = (
        "import asyncio\n"
        "from magnetar.metadata import connect\n"
        "async def main():\n"
        f"    s = await connect('sqlite://{db}')\n"
        "    assert (await s.get('/kept')).value == b'yes'\n"
        "    assert await s.exists('/eph') is None\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)


async def test_file_is_held_by_one_process(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    store = await connect(f"sqlite://{db}")
    script = (
        "import asyncio\n"
        "from magnetar.metadata import connect\n"
        f"asyncio.run(connect('sqlite://{db}'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "open in another process" in result.stderr
    await store.close()


async def test_sessions_share_a_named_memory_database() -> None:
    a = await connect("memory:shared-by-name")
    b = await connect("memory:shared-by-name")
    private = await connect("memory:")
    await a.put("/x", b"1")
    assert (await b.get("/x")).value == b"1"
    assert await private.exists("/x") is None
    for s in (a, b, private):
        await s.close()
    fresh = await connect("memory:shared-by-name")  # last close dropped the database
    assert await fresh.exists("/x") is None
    await fresh.close()


async def test_unknown_urls_and_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await connect("etcd://localhost")
    with pytest.raises(ValueError):
        await connect(f"sqlite://{tmp_path / 'x.db'}?journal=off")
    assert issubclass(MetadataError, Exception)


async def test_concurrent_writes_commit_together_and_fail_alone(tmp_path: Path) -> None:
    """Writes issued together go to the worker as one batch (one transaction) but each keeps
    its own outcome: one that fails (a node that exists) changes nothing and fails alone,
    and every other one is stored and survives a reopen."""
    url = f"sqlite://{tmp_path / 'meta.db'}"
    store = await connect(url)
    await store.create("/taken", b"first")
    outcomes = await asyncio.gather(
        *(store.create(f"/n/{i}", str(i).encode()) for i in range(50)),
        store.create("/taken", b"second"),
        *(store.put(f"/p/{i}", b"v") for i in range(50)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[50], NodeExists)
    assert not any(isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != 50)
    await store.close()
    reopened = await connect(url)
    assert (await reopened.get("/taken")).value == b"first"
    assert sorted(await reopened.children("/n"), key=int) == [str(i) for i in range(50)]
    assert len(await reopened.children("/p")) == 50
    await reopened.close()


async def test_a_failed_write_leaves_no_trace_of_the_batch_run_before(tmp_path: Path) -> None:
    """A batch in which one write fails is run again (with a savepoint per write): what the
    first run did is rolled back whole, so sequence numbers have no gaps and every change
    is notified once."""
    store = await connect(f"sqlite://{tmp_path / 'meta.db'}")
    await store.create("/taken", b"")
    await store.create("/q", b"")
    async with store.notifications("/q") as stream:
        await stream.wait_ready()
        outcomes = await asyncio.gather(
            *(store.create("/q/n-", b"", sequential=True) for _ in range(10)),
            store.create("/taken", b""),
            *(store.create("/q/n-", b"", sequential=True) for _ in range(10)),
            return_exceptions=True,
        )
        assert isinstance(outcomes[10], NodeExists)
        created = [o for i, o in enumerate(outcomes) if i != 10]
        assert created == [f"/q/n-{i:010d}" for i in range(20)]
        await store.create("/q/end", b"")
        seen: list[str] = []
        async for event in stream:
            if event.type is EventType.CREATED:
                seen.append(event.path)
                if event.path == "/q/end":
                    break
    assert seen == [*created, "/q/end"]
    await store.close()


async def test_operations_of_a_loop_run_in_the_order_issued(tmp_path: Path) -> None:
    """A read issued after a write, before the write is answered, sees it (a ZooKeeper
    session's order), and a write after a failed one in the same batch still applies."""
    store = await connect(f"sqlite://{tmp_path / 'meta.db'}")
    await store.create("/a", b"0")
    results = await asyncio.gather(
        store.put("/a", b"1"),
        store.get("/a"),
        store.put("/a", b"2", expected_version=0),  # stale: fails alone
        store.put("/a", b"3", expected_version=1),
        store.get("/a"),
        return_exceptions=True,
    )
    assert results[1].value == b"1"  # type: ignore[union-attr]
    assert isinstance(results[2], BadVersion)
    assert results[4].value == b"3"  # type: ignore[union-attr]
    await store.close()
