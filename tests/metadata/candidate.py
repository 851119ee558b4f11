"""A leader-election candidate process for the multi-process election tests and benchmark.

Usage: python candidate.py <store-url> <candidate-id> <log-file> <session-timeout-s>

Forever: campaign at /controller; while leader, append a fenced write (a sequential node
under /writes holding "<id>:<epoch>") every 50 ms; when deposed, try one more write with the
old epoch on the old session and on a fresh session (both must be refused), then campaign
again on a new session. Every step is one line in the log: "<unix time> <EVENT> <args>".
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

from magnetar.common.clock import SystemClock
from magnetar.metadata import ConnectionLoss, CreateOp, MetadataStoreError, connect
from magnetar.metadata.election import LeaderElection, fenced_multi

WRITE_INTERVAL_S = 0.05


async def main(url: str, cid: str, log_path: str, session_timeout_s: float) -> None:
    clock = SystemClock()
    with open(log_path, "a", buffering=1) as log:

        def emit(*parts: object) -> None:
            log.write(" ".join([f"{time.time():.6f}", *map(str, parts)]) + "\n")

        emit("START", cid)
        while True:
            store = await connect(url, session_timeout_s=session_timeout_s, clock=clock)
            emit("SESSION", hex(store.session_id))
            election = LeaderElection(store, "/controller", cid.encode())
            try:
                epoch = await election.campaign()
            except MetadataStoreError as exc:
                emit("CAMPAIGN_FAILED", type(exc).__name__)
                await store.close()
                continue
            emit("LEADER", epoch)
            write = [CreateOp("/writes/w-", f"{cid}:{epoch}".encode(), sequential=True)]
            deposed = asyncio.create_task(election.wait_deposed())
            while not deposed.done():
                try:
                    await election.fenced_multi(epoch, write)
                    emit("WRITE_OK", epoch)
                except ConnectionLoss:
                    emit("WRITE_UNCERTAIN", epoch)
                except MetadataStoreError as exc:
                    emit("WRITE_REJECTED", epoch, type(exc).__name__)
                    break
                await asyncio.wait([deposed], timeout=WRITE_INTERVAL_S)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(deposed, timeout=session_timeout_s * 3)
            emit("DEPOSED", epoch, store.session_state.value)
            try:
                await election.fenced_multi(epoch, write)
                emit("STALE_WRITE_ACCEPTED", epoch)
            except MetadataStoreError as exc:
                emit("STALE_WRITE_REJECTED", epoch, type(exc).__name__)
            await store.close()
            fresh = await connect(url, session_timeout_s=session_timeout_s, clock=clock)
            try:
                await fenced_multi(fresh, "/controller_epoch", epoch, write)
                emit("STALE_NEW_SESSION_ACCEPTED", epoch)
            except MetadataStoreError as exc:
                emit("STALE_NEW_SESSION_REJECTED", epoch, type(exc).__name__)
            await fresh.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
