"""Reading a ledger's entries from its replicas (the read side of
:class:`~magnetar.ledger.handle.LedgerHandle`, for handles of either kind).

:meth:`LedgerHandle.read <magnetar.ledger.handle.LedgerHandle.read>` returns entries
``first..last`` (inclusive) up to the last confirmed entry, a chunk at a time
(:func:`read_chunk`). Entries with the same id modulo the ensemble size share a write set,
so each such class within a fragment is asked for as one run (READ_ENTRIES with that stride:
up to ``read_run_bytes_max`` bytes per response), the classes at once, each from the first
replica of its write set, then the next one if a replica fails, is slower than
``speculative_read_timeout_ms`` or lacks the run's first entry. A run may end early (byte
bound, an entry missing or damaged there): reading goes on from the first entry no run
brought. A class no replica gave a run of is read entry by entry
(:func:`read_from_replicas`): each entry from the first replica of its write set, falling
back to the next one when a replica errs or is slower than ``speculative_read_timeout_ms``.

Each function takes the handle's own client (its bookie pool, clock, loop and config) and
uses the handle's ledger metadata as it is when that read starts (a writer's ensemble
changes replace it).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import OpType, Status, split_bodies
from magnetar.bookie_protocol.errors import error_for_status
from magnetar.common import crc32c
from magnetar.ledger.errors import BookieError, BookieUnavailable, DigestMismatch, NoSuchEntry

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Response
    from magnetar.ledger.client import LedgerClient
    from magnetar.ledger.handle import LedgerHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry read back. ``data`` belongs to the caller."""

    ledger_id: int
    entry_id: int
    data: bytes


async def read_chunk(
    client: LedgerClient, handle: LedgerHandle, start: int, stop: int
) -> list[Entry]:
    """Entries ``start..`` (``stop`` at most, in one fragment): a non-empty prefix.

    Entries ``e`` with the same ``e % E`` have the same write set, so each such class is
    asked for as one run (READ_ENTRIES with stride E, :func:`_read_run`), the E runs at
    once; a class no replica gave a run of is read entry by entry. A run may end early
    (byte bound, an entry missing or damaged on that bookie): the prefix ends before the
    first entry no run brought, and the caller asks again from there."""
    stride = handle.metadata.ensemble_size
    classes = [range(start + r, stop + 1, stride) for r in range(min(stride, stop - start + 1))]
    runs = await asyncio.gather(*(_read_run(client, handle, ids) for ids in classes))
    got: dict[int, Entry] = {}
    singles: list[int] = []
    for ids, run in zip(classes, runs, strict=True):
        if run:
            got.update((e.entry_id, e) for e in run)
        else:
            singles.extend(ids)
    for single in await asyncio.gather(*(handle.read_entry(e) for e in singles)):
        got[single.entry_id] = single
    out: list[Entry] = []
    for entry_id in range(start, stop + 1):
        entry = got.get(entry_id)
        if entry is None:
            break
        out.append(entry)
    return out


async def _read_run(client: LedgerClient, handle: LedgerHandle, ids: range) -> list[Entry]:
    """The entries ``ids`` (one class of the same write set) in one READ_ENTRIES, from
    the first replica of their write set, or the next one if that fails, is slower than
    ``speculative_read_timeout_ms`` or has ``ids[0]`` missing or damaged: the good
    entries before anything goes wrong, ``[]`` if no replica gave one."""
    md = handle.metadata
    ensemble = md.ensemble_for(ids.start)
    for i in md.write_set(ids.start):
        run = await _read_run_from(client, handle.ledger_id, ensemble[i], ids)
        if run:
            return run
    return []


async def _read_run_from(
    client: LedgerClient, ledger_id: int, bookie_id: str, ids: range
) -> list[Entry]:
    cfg = client.config
    request = codec.Request(
        op=OpType.READ_ENTRIES,
        ledger_id=ledger_id,
        entry_id=ids.start,
        last_entry_id=ids[-1],
        stride=ids.step,
        max_bytes=cfg.read_run_bytes_max,
    )
    try:
        resp, payload = await asyncio.wait_for(
            client.pool.call(bookie_id, request),
            cfg.speculative_read_timeout_ms / 1000,
        )
    except (BookieError, TimeoutError) as exc:
        log.debug("entries %d:%d.. from %s: %s", ledger_id, ids.start, bookie_id, exc)
        return []
    sizes = resp.entry_sizes
    checksums = resp.checksums
    if (
        resp.status != Status.OK
        or len(sizes) != len(checksums)
        or len(sizes) > len(ids)
        or sum(sizes) != len(payload)
    ):
        return []
    run: list[Entry] = []
    for entry_id, data, checksum in zip(ids, split_bodies(payload, sizes), checksums, strict=False):
        if crc32c.crc32c(data) != checksum:
            log.warning("entry %d:%d from %s: checksum mismatch", ledger_id, entry_id, bookie_id)
            break
        run.append(Entry(ledger_id, entry_id, data))
    return run


async def read_from_replicas(
    client: LedgerClient, handle: LedgerHandle, entry_id: int, op: OpType
) -> tuple[bytes, int]:
    """First good copy from the write set; next replica on error or after the
    speculative timeout. Returns ``(payload, lac stored with it)``."""
    md = handle.metadata
    ensemble = md.ensemble_for(entry_id)
    replicas = [ensemble[i] for i in md.write_set(entry_id)]
    pool = client.pool
    clock = client.clock
    spec_s = client.config.speculative_read_timeout_ms / 1000
    loop = client.loop
    in_flight: set[asyncio.Task[tuple[Response, bytes]]] = set()
    errors: list[BaseException] = []
    next_i = 0
    while True:
        if next_i < len(replicas):
            req = codec.Request(op=op, ledger_id=handle.ledger_id, entry_id=entry_id)
            in_flight.add(loop.create_task(pool.call(replicas[next_i], req)))
            next_i += 1
        if not in_flight:
            break
        timer = loop.create_task(clock.sleep(spec_s)) if next_i < len(replicas) else None
        waiting: set[asyncio.Task[object]] = set(in_flight)
        if timer is not None:
            waiting.add(timer)
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if timer is not None:
            timer.cancel()
        for task in [t for t in in_flight if t.done()]:
            in_flight.discard(task)
            exc = task.exception()
            if exc is not None:
                errors.append(exc)
                continue
            resp, payload = task.result()
            if resp.status != Status.OK:
                errors.append(error_for_status(resp.status, resp.message))
                continue
            if crc32c.crc32c(payload) != resp.checksum:
                errors.append(DigestMismatch(f"entry {handle.ledger_id}:{entry_id}"))
                continue
            for other in in_flight:
                other.cancel()
            return payload, resp.last_add_confirmed
    if errors and all(isinstance(e, NoSuchEntry) for e in errors):
        raise NoSuchEntry(f"entry {handle.ledger_id}:{entry_id} not found on {replicas}")
    raise BookieUnavailable(
        f"entry {handle.ledger_id}:{entry_id}: no replica answered ({'; '.join(map(str, errors))})"
    )
