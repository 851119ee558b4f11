"""Health and readiness: whether this broker can serve, and if not, one line saying why.

The broker writes through bookies: it is unhealthy when fewer writable bookies are
registered than a new ledger's ensemble needs (bookies that turned read-only because their
disk filled or a write failed re-register under ``/ledgers/available/readonly``), because
then every append fails until storage recovers.
"""

from __future__ import annotations

from magnetar.broker.service import BrokerService
from magnetar.ledger.metadata import AVAILABLE_PATH, READONLY_NAME
from magnetar.managed_ledger.storage import LedgerClientStorage
from magnetar.metadata.store import NotFound

READONLY_BOOKIES_PATH = f"{AVAILABLE_PATH}/{READONLY_NAME}"


async def storage_problem(service: BrokerService) -> str | None:
    """Why appends cannot succeed now, or ``None`` when enough writable bookies exist.
    Brokers on another storage (tests) are always healthy here."""
    storage = service.storage
    if not isinstance(storage, LedgerClientStorage):
        return None
    client = storage.client
    writable = await client.available_bookies()
    if len(writable) >= storage.ensemble_size:
        return None
    try:
        readonly = sorted(await client.store.children(READONLY_BOOKIES_PATH))
    except NotFound:
        readonly = []
    why = f"read-only bookies: {', '.join(readonly)}" if readonly else "no read-only bookies"
    return (
        f"storage not writable: {len(writable)} writable bookies, a ledger needs "
        f"{storage.ensemble_size} ({why})"
    )
