"""Tiered storage as the managed ledger sees it: the :class:`Offloader` port and the
:class:`OffloadContext` each ledger's metadata records.

The managed ledger depends on this Protocol only; :class:`magnetar.offload.offloader.BlobStoreOffloader`
implements it over an object store (the broker hands one to each topic's managed ledger).
The orchestration (when, in which order, what is written to the metadata store before and
after an upload) is :mod:`~magnetar.managed_ledger.offload_manager`.

Objects are named by ``(uuid, ledger id)``: one attempt of one ledger. The uuid is recorded
in the ledger's :class:`OffloadContext` before the upload starts, so a crash leaves an
attempt the next one finds and deletes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

ReadRange = Callable[[int, int], Awaitable[Sequence[bytes]]]
"""Reads entries ``first..last`` (inclusive) of the ledger being offloaded."""


class Offloader(Protocol):
    """Copies closed ledgers into tiered storage and reads them back."""

    @property
    def driver_name(self) -> str:
        """Pulsar's driver name (``filesystem``, ``aws-s3``, ``s3``), recorded per ledger."""
        ...

    @property
    def driver_metadata(self) -> Mapping[str, str]:
        """Where the objects go (bucket, region, endpoint or directory), recorded per ledger."""
        ...

    async def offload(
        self, uuid: str, ledger_id: int, last_entry_id: int, read: ReadRange, metadata: bytes
    ) -> object:
        """Copy entries ``0..last_entry_id`` of a closed ledger as attempt ``uuid``; returns
        only once the copy is complete (its index written). Raises a retriable
        :class:`~magnetar.common.errors.MagnetarError` when the store fails (nothing is then
        complete)."""
        ...

    async def read(self, uuid: str, ledger_id: int, first: int, last: int) -> Sequence[bytes]:
        """Entries ``first..last`` of a complete copy. Raises a
        :class:`~magnetar.common.errors.MagnetarError` naming the ledger when the objects are
        missing or corrupt."""
        ...

    async def delete(self, uuid: str, ledger_id: int) -> None:
        """Remove attempt ``uuid``'s objects (idempotent)."""
        ...


class OffloaderSource(Protocol):
    """The offloaders a process can open: a ledger is read (and its objects deleted) with
    the driver recorded in its :class:`OffloadContext`, whatever the topic's offload policy
    names now (Pulsar reads each ledger with the offloader recorded for it)."""

    def for_context(self, context: OffloadContext) -> Offloader | None:
        """The offloader of the driver ``context`` records (None: it cannot be opened)."""
        ...


@dataclass(slots=True)
class OffloadContext:
    """Pulsar's ``OffloadContext`` of one ledger (kept in the managed ledger's metadata).

    ``uuid`` is set before the upload starts; ``complete`` only once the index object is
    written; ``bookkeeper_deleted`` once the bookie copy is gone (the deletion lag after
    ``timestamp_ms``, the completion time)."""

    uuid: str
    complete: bool = False
    bookkeeper_deleted: bool = False
    timestamp_ms: int = 0
    driver_name: str = ""
    driver_metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "complete": self.complete,
            "bookkeeper_deleted": self.bookkeeper_deleted,
            "timestamp_ms": self.timestamp_ms,
            "driver_name": self.driver_name,
            "driver_metadata": dict(self.driver_metadata),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OffloadContext:
        return cls(
            uuid=str(data["uuid"]),
            complete=bool(data.get("complete", False)),
            bookkeeper_deleted=bool(data.get("bookkeeper_deleted", False)),
            timestamp_ms=int(data.get("timestamp_ms", 0)),
            driver_name=str(data.get("driver_name", "")),
            driver_metadata={
                str(k): str(v) for k, v in (data.get("driver_metadata") or {}).items()
            },
        )
