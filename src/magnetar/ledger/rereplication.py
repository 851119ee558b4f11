"""The replication worker's copy of one fragment replica (autorecovery), over the bookie
protocol.

:func:`rereplicate_fragment` carries out the plan of :mod:`magnetar.ledger.fragments`:
it reads every entry the missing replica held from the other replicas of its write set
(``READ_ENTRY``; the first that answers with a good checksum), writes it to the target
bookie with a recovery add (so a ledger fenced by a recovery on that bookie still takes it),
keeping the checksum and the last-add-confirmed stored with it, and only when every entry is
on the target replaces the missing bookie by the target in the ledger metadata, by
compare-and-set (re-read and re-applied on a version conflict, so a writer's concurrent
ensemble change or close is kept). A copy that fails midway leaves the metadata untouched;
the entries already on the target are harmless and overwritten by the next try.
"""

from __future__ import annotations

import asyncio

from magnetar.bookie_protocol import codec
from magnetar.bookie_protocol.codec import OpType, Status
from magnetar.common import crc32c
from magnetar.common.errors import PersistenceError
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.errors import BookieUnavailable, NoSuchEntry
from magnetar.ledger.fragments import RereplicationPlan, plan_rereplication, replace_replica
from magnetar.ledger.metadata import LedgerMetadata, ledger_path
from magnetar.ledger.transport import AddRun
from magnetar.metadata.store import BadVersion

COPIES_IN_FLIGHT_MAX = 64


async def rereplicate_fragment(
    client: LedgerClient,
    ledger_id: int,
    first_entry: int,
    bookie_index: int,
    missing_bookie: str,
    target_bookie: str,
    *,
    copies_in_flight_max: int = COPIES_IN_FLIGHT_MAX,
) -> tuple[LedgerMetadata, int]:
    """Copy the replica ``missing_bookie`` held at ``bookie_index`` of the fragment starting
    at ``first_entry`` onto ``target_bookie`` and name the target in the metadata. Returns
    the metadata and node version written (or found, when the replica had already been
    replaced: nothing copied).

    Raises :class:`~magnetar.ledger.errors.NoSuchLedger`,
    :class:`~magnetar.ledger.fragments.FragmentChanged` (the fragment changed under the
    copy), :class:`ValueError` (the target is in the fragment's ensemble),
    :class:`BookieUnavailable` or :class:`NoSuchEntry` (no other replica of an entry
    answered with it), and the target's refusal as a
    :class:`~magnetar.ledger.errors.BookieError`."""
    metadata, version = await client.get_metadata(ledger_id)
    plan = plan_rereplication(metadata, first_entry, bookie_index, missing_bookie, target_bookie)
    if plan is None:
        return metadata, version
    window: list[int] = []
    for entry_id in plan.entries():
        window.append(entry_id)
        if len(window) >= copies_in_flight_max:
            await _copy_window(client, plan, window)
            window = []
    if window:
        await _copy_window(client, plan, window)
    path = ledger_path(ledger_id)
    while True:
        updated = replace_replica(metadata, plan)
        try:
            stat = await client.store.put(path, updated.to_bytes(), version)
        except BadVersion:
            metadata, version = await client.get_metadata(ledger_id)
            continue
        return updated, stat.version


async def _copy_window(client: LedgerClient, plan: RereplicationPlan, window: list[int]) -> None:
    """Copy ``window`` concurrently; every copy ends before the first error is raised (no
    copy keeps running after the task failed)."""
    results = await asyncio.gather(
        *(_copy_entry(client, plan, e) for e in window), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _copy_entry(client: LedgerClient, plan: RereplicationPlan, entry_id: int) -> None:
    payload, checksum, lac = await _read_from_sources(client, plan, entry_id)
    target = await client.pool.get(plan.target_bookie)
    request = AddRun(
        client.pool.next_request_id(),
        plan.ledger_id,
        entry_id,
        lac,
        [checksum],
        [payload],
        recovery=True,
    )
    done: asyncio.Future[None] = client.loop.create_future()

    def answered(error: PersistenceError | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    target.add(request, answered)
    await done


async def _read_from_sources(
    client: LedgerClient, plan: RereplicationPlan, entry_id: int
) -> tuple[bytes, int, int]:
    """``(payload, checksum, last_add_confirmed)`` from the first other replica that has
    the entry intact, trying them in write-set order."""
    errors: list[str] = []
    missing = 0
    sources = plan.sources(entry_id)
    for source in sources:
        request = codec.Request(op=OpType.READ_ENTRY, ledger_id=plan.ledger_id, entry_id=entry_id)
        try:
            resp, payload = await client.pool.call(source, request)
        except BookieUnavailable as exc:
            errors.append(str(exc))
            continue
        if resp.status == Status.OK and crc32c.crc32c(payload) == resp.checksum:
            return payload, resp.checksum, resp.last_add_confirmed
        if resp.status in (Status.NO_SUCH_ENTRY, Status.NO_SUCH_LEDGER):
            missing += 1
        errors.append(f"{source}: status {resp.status}")
    if missing == len(sources):
        raise NoSuchEntry(f"entry {plan.ledger_id}:{entry_id} is on none of {sources}")
    raise BookieUnavailable(
        f"entry {plan.ledger_id}:{entry_id}: no other replica answered ({'; '.join(errors)})"
    )
