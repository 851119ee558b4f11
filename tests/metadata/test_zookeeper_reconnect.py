"""A ZooKeeper session that survives a dropped connection keeps every notification stream
fed, including a stream whose watches were being set when the connection dropped (the
request failed with ConnectionLoss, so ZooKeeper never had those watches to restore)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from magnetar.metadata import connect
from magnetar.metadata.store import EventType, SessionState
from magnetar.testing import wait_until_async
from magnetar.testing.fault_proxy import FaultProxy

SESSION_TIMEOUT_S = 12.0


async def test_a_stream_armed_while_the_connection_dropped_is_fed_after_reconnection(
    zookeeper_url: str,
) -> None:
    parts = urlsplit(zookeeper_url)
    assert parts.port is not None
    writer = await connect(zookeeper_url)
    with FaultProxy("127.0.0.1", parts.port) as link:
        store = await connect(
            f"zk://127.0.0.1:{link.port}{parts.path}", session_timeout_s=SESSION_TIMEOUT_S
        )
        try:
            link.cut()
            # The watch request goes out and is held by the cut link; the client then gives
            # up on the silent connection (a fraction of the session timeout), failing it.
            stream = store.notifications("/watched")
            async with asyncio.timeout(SESSION_TIMEOUT_S):
                await stream.wait_ready()
            link.reset_connections()
            link.heal()
            await wait_until_async(
                lambda: store.session_state is SessionState.CONNECTED, timeout_s=SESSION_TIMEOUT_S
            )
            await writer.put("/watched", b"v")
            async with asyncio.timeout(10):
                async for event in stream:
                    if event.path == "/watched" and event.type is EventType.CREATED:
                        break
            stream.close()
        finally:
            await store.close()
            await writer.close()


async def test_every_stream_is_fed_after_a_reconnection_on_the_same_session(
    zookeeper_url: str,
) -> None:
    """ZooKeeper drops a connection's watches with the connection, and kazoo does not set
    them again on the next one: the store must, and publish what changed in between."""
    parts = urlsplit(zookeeper_url)
    assert parts.port is not None
    writer = await connect(zookeeper_url)
    await writer.put("/leader", b"a")
    await writer.put("/tree/a/x", b"1")
    with FaultProxy("127.0.0.1", parts.port) as link:
        store = await connect(
            f"zk://127.0.0.1:{link.port}{parts.path}", session_timeout_s=SESSION_TIMEOUT_S
        )
        leader = store.notifications("/leader")
        tree = store.notifications("/tree")
        try:
            await leader.wait_ready()
            await tree.wait_ready()
            session = store.session_id
            states = store.session_states()
            link.reset_connections()
            await writer.put("/tree/a/x", b"2")  # while (or just before) disconnected
            async with asyncio.timeout(SESSION_TIMEOUT_S):
                async for state in states:
                    if state is SessionState.SUSPENDED:
                        break
                async for state in states:
                    if state is SessionState.CONNECTED:
                        break
            states.close()
            assert store.session_id == session
            await writer.delete("/leader")  # after the reconnection
            await writer.put("/tree/a/y", b"1")
            seen: set[tuple[EventType, str]] = set()
            want = {
                (EventType.DELETED, "/leader"),
                (EventType.CREATED, "/tree/a/y"),
                (EventType.MODIFIED, "/tree/a/x"),
            }
            async with asyncio.timeout(10):
                async for event in leader:
                    seen.add((event.type, event.path))
                    if (EventType.DELETED, "/leader") in seen:
                        break
                async for event in tree:
                    seen.add((event.type, event.path))
                    if want <= seen:
                        break
        finally:
            leader.close()
            tree.close()
            await store.close()
            await writer.delete_recursive("/tree")
            await writer.close()
