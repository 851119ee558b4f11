"""A topic's messages as its ledgers hold them, read from the metadata store and the bookies
(not through a broker), for :meth:`~magnetar.testing.history.History.check_stored`.

Read after the run, once no broker writes the topic any more: a ledger still open is
recovered (fenced and closed at what an ack quorum holds), as a new owner would.
"""

from __future__ import annotations

import json

from magnetar.broker.service import managed_ledger_name
from magnetar.common.names import TopicName
from magnetar.ledger.client import LedgerClient
from magnetar.managed_ledger.cursor import CursorSnapshot
from magnetar.managed_ledger.metadata_layout import ManagedLedgerInfo, cursor_path, ledger_path
from magnetar.metadata import connect
from magnetar.metadata.store import NotFound
from magnetar.protocol.entry import Entry
from magnetar.testing.history import StoredEntry

READ_BATCH = 500


async def stored_entries(metadata_url: str, topic: str) -> list[StoredEntry]:
    """Every entry of ``topic`` (unbatched messages), in the managed ledger's order."""
    store = await connect(metadata_url, session_timeout_s=10)
    try:
        got = await store.get(ledger_path(managed_ledger_name(TopicName.parse(topic))))
        info = ManagedLedgerInfo.decode(got.value)
        client = LedgerClient(store)
        try:
            out: list[StoredEntry] = []
            for segment in info.ledgers:
                handle = await client.open(segment.ledger_id)
                last = handle.last_add_confirmed
                for first in range(0, last + 1, READ_BATCH):
                    for e in await handle.read(first, min(last, first + READ_BATCH - 1)):
                        view = Entry(e.data)
                        out.append(
                            StoredEntry(
                                e.ledger_id,
                                e.entry_id,
                                view.metadata.producer_name,
                                view.metadata.sequence_id,
                                bytes(view.payload).decode(),
                            )
                        )
            return out
        finally:
            await client.close()
    finally:
        await store.close()


async def stored_mark_delete(
    metadata_url: str, topic: str, subscription: str
) -> tuple[int, int] | None:
    """A durable lower bound of the cursor's mark-delete position: the later of its
    metadata node's (written when the cursor starts a ledger) and the last snapshot its
    cursor ledger confirms (opened without recovery: the owner keeps writing); None before
    the first persist."""
    store = await connect(metadata_url, session_timeout_s=10)
    try:
        name = managed_ledger_name(TopicName.parse(topic))
        try:
            got = await store.get(cursor_path(name, subscription))
        except NotFound:
            return None
        node = json.loads(got.value)
        mark = node.get("mark_delete")
        best = (int(mark[0]), int(mark[1])) if mark else None
        if node.get("cursor_ledger", -1) >= 0:
            client = LedgerClient(store)
            try:
                handle = await client.open(node["cursor_ledger"])
                lac = handle.last_add_confirmed
                if lac >= 0:
                    snapshot = CursorSnapshot.decode((await handle.read(lac, lac))[0].data)
                    last = (snapshot.mark_delete.ledger_id, snapshot.mark_delete.entry_id)
                    best = last if best is None else max(best, last)
            finally:
                await client.close()
        return best
    finally:
        await store.close()
