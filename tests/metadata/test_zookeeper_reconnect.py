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
