"""Whether a bookie takes adds, and how it is registered: :class:`BookieState` (BookKeeper's
``BookieStateManager``).

A bookie is read-only while any of these holds, writable again once none does:

* the disk is full by its :class:`~magnetar.bookie.disk_check.DiskThresholds` (usage at
  0.95 or above, until it is below 0.90; looked at by :meth:`BookieState.look_at_disk`: on
  the disk monitor's timer and after every ``check_every_bytes`` written, see
  :mod:`magnetar.bookie.disk_check`);
* a journal write or a checkpoint failed (``ENOSPC``, ``EIO``): :attr:`BookieState.storage_fault`,
  cleared by the disk monitor once a retried checkpoint works and the disk has room;
* an operator forced it (:meth:`BookieState.set_readonly`).

A writable bookie is registered as the ephemeral node ``/ledgers/available/<id>``, a
read-only one as ``/ledgers/available/readonly/<id>``, its value JSON
``{"bookie_id", "readonly"[, "rack"], "disk_free_bytes", "disk_total_bytes"}`` (the rack the
bookie was started with; the free and total bytes of its data directory's file system at the
last look, for the console). A change of mode re-registers in the background; a
re-registration that fails is retried by the disk monitor (the metadata store may share the
full disk). The disk figures are rewritten in place by the disk monitor only once free space
moved by more than :data:`DISK_PUBLISH_STEP` of the disk since they were written (a
metadata write is not free), never on the add path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path

from magnetar.bookie.disk_check import (
    DiskSpace,
    DiskThresholds,
    WrittenBytesTrigger,
    disk_space,
)
from magnetar.bookie_protocol.layout import AVAILABLE_PATH, READONLY_PATH
from magnetar.common.errors import MagnetarError
from magnetar.metadata.store import BadVersion, MetadataStore, NodeExists, NotFound

log = logging.getLogger("magnetar.bookie")

DISK_PUBLISH_STEP = 0.01
"""The registration's disk figures are rewritten once free space moved by more than this
share of the disk's size since they were written."""


def disk_moved(published: DiskSpace | None, now: DiskSpace) -> bool:
    """Whether the published disk figures are stale enough to rewrite (see
    :data:`DISK_PUBLISH_STEP`)."""
    if published is None or published.total_bytes != now.total_bytes:
        return True
    return abs(published.free_bytes - now.free_bytes) > now.total_bytes * DISK_PUBLISH_STEP


class BookieState:
    """Read-only mode and registration of one bookie (see the module docstring).

    ``metadata`` ``None``: a bookie without a cluster, never registered."""

    def __init__(
        self,
        bookie_id: str,
        data_dir: Path,
        metadata: MetadataStore | None,
        *,
        thresholds: DiskThresholds,
        check_every_bytes: int,
        rack: str | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self._data_dir = data_dir
        self._metadata = metadata
        self._rack = rack
        self._thresholds = thresholds
        self._disk_full = False
        self._disk_state = ""
        """The last look at the disk, described (for the read-only reason)."""
        self.readonly = False
        self.storage_fault: str | None = None
        """Why storage cannot be written (a failed journal write or checkpoint), or None."""
        self._forced_readonly = False
        self._registered_readonly: bool | None = None
        """How the bookie is registered now (None: not yet, or a re-registration failed)."""
        self._registration_version = 0
        """The metadata version of the registration node (rewritten in place by
        :meth:`publish_disk_if_moved`)."""
        self.disk: DiskSpace | None = None
        """The disk at the last look (None: not looked yet)."""
        self._published_disk: DiskSpace | None = None
        """The disk figures in the registration."""
        self.disk_trigger = WrittenBytesTrigger(check_every_bytes)
        """The add path counts written bytes here (see :meth:`look_if_written_enough`)."""
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- read-only mode -------------------------------------------------------------------

    def look_at_disk(self) -> bool:
        """Read free space and set :attr:`readonly`; True if it changed (logged)."""
        self.disk_trigger.looked()
        space = self.disk = disk_space(self._data_dir)
        low = self._disk_full = self._thresholds.next_full(self._disk_full, space)
        self._disk_state = self._thresholds.describe(space)
        want = self._forced_readonly or low or self.storage_fault is not None
        changed = want != self.readonly
        if changed:
            if self.storage_fault is not None:
                why = self.storage_fault
            elif low:
                why = self._disk_state
            elif self._forced_readonly:
                why = "forced"
            else:
                why = f"{self._disk_state}, storage works again"
            log.warning(
                "bookie %s turns %s (%s)",
                self.bookie_id,
                "read-only" if want else "writable",
                why,
            )
        self.readonly = want
        return changed

    def look_if_written_enough(self) -> None:
        """Look at free space if enough was written since the last look (called once per
        batch of adds, not per add)."""
        if self.disk_trigger.due and self.look_at_disk():
            self._reregister_soon()

    def write_problem(self) -> str | None:
        """Why this bookie takes no adds now (one line), or None when it is writable."""
        if not self.readonly:
            return None
        if self.storage_fault is not None:
            return f"bookie {self.bookie_id} is read-only: {self.storage_fault}"
        if self._forced_readonly:
            return f"bookie {self.bookie_id} is read-only (set by an operator)"
        return f"bookie {self.bookie_id} is read-only: disk full ({self._disk_state})"

    async def set_readonly(self, readonly: bool) -> None:
        """Force read-only mode on or off (operators, tests); disk checks still apply."""
        self._forced_readonly = readonly
        if self.look_at_disk():
            await self.register()

    def storage_failed(self, reason: str) -> None:
        """A journal write or checkpoint failed: stop taking adds until storage works."""
        if self.storage_fault is None:
            self.storage_fault = reason
        if self.look_at_disk():
            self._reregister_soon()

    def journal_write_failed(self, exc: BaseException) -> None:
        """The journal's ``on_write_failure`` listener."""
        self.storage_failed(f"journal write failed: {exc}")

    def storage_works(self) -> None:
        """A checkpoint worked again: clear the fault if the disk has room (the next look
        at the disk turns the bookie writable)."""
        if self._thresholds.has_room(disk_space(self._data_dir)):
            log.warning("bookie %s: storage works again (%s)", self.bookie_id, self.storage_fault)
            self.storage_fault = None

    # -- registration ----------------------------------------------------------------------

    @property
    def registration_stale(self) -> bool:
        """The registration does not show the mode (not yet made, or a re-registration
        failed)."""
        return self._registered_readonly != self.readonly

    async def register(self) -> None:
        """Register under the path of the current mode (replacing the other one, and a node
        a previous session of ours may still hold). Raises ``MetadataError``."""
        if self._metadata is None:
            return
        readonly = self.readonly
        disk = self.disk
        info = self._registration(readonly, disk)
        want = f"{READONLY_PATH if readonly else AVAILABLE_PATH}/{self.bookie_id}"
        other = f"{AVAILABLE_PATH if readonly else READONLY_PATH}/{self.bookie_id}"
        with contextlib.suppress(NotFound):
            await self._metadata.delete(other)
        try:
            await self._metadata.create(want, info, ephemeral=True)
        except NodeExists:
            # A previous session of ours may still hold it until it expires: replace it.
            with contextlib.suppress(NotFound):
                await self._metadata.delete(want)
            await self._metadata.create(want, info, ephemeral=True)
        self._registered_readonly = readonly
        self._registration_version = 0
        self._published_disk = disk

    def _registration(self, readonly: bool, disk: DiskSpace | None) -> bytes:
        body: dict[str, object] = {"bookie_id": self.bookie_id, "readonly": readonly}
        if self._rack is not None:
            body["rack"] = self._rack
        if disk is not None:
            body["disk_free_bytes"] = disk.free_bytes
            body["disk_total_bytes"] = disk.total_bytes
        return json.dumps(body).encode()

    async def publish_disk_if_moved(self) -> None:
        """Rewrite the registration's disk figures if free space moved by more than
        :data:`DISK_PUBLISH_STEP` since they were written (the disk monitor calls it after
        a look that changed no mode). Writes only a registration that is current, at the
        version this session wrote, so it never recreates a node the session lost: a failed
        write marks the registration stale for the monitor's next re-registration."""
        disk = self.disk
        if self._metadata is None or disk is None or self.registration_stale:
            return
        if not disk_moved(self._published_disk, disk):
            return
        readonly = self.readonly
        path = f"{READONLY_PATH if readonly else AVAILABLE_PATH}/{self.bookie_id}"
        info = self._registration(readonly, disk)
        try:
            stat = await self._metadata.put(path, info, self._registration_version)
        except (BadVersion, NotFound) as exc:
            self._registered_readonly = None
            log.warning("bookie %s: registration changed under us (%s), re-registering",
                        self.bookie_id, exc)  # fmt: skip
            return
        except MagnetarError as exc:
            log.warning("bookie %s: disk figures not published (retried): %s", self.bookie_id, exc)
            return
        self._registration_version = stat.version
        self._published_disk = disk

    async def reregister(self) -> None:
        """:meth:`register`, logging a failure (the disk monitor retries)."""
        if self._metadata is None:
            return
        try:
            await self.register()
        except MagnetarError as exc:
            self._registered_readonly = None
            log.warning("bookie %s: re-registration failed (retried): %s", self.bookie_id, exc)
        except Exception:
            self._registered_readonly = None
            log.exception("re-registration failed")

    def _reregister_soon(self) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self.reregister())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def stop_reregistering(self) -> None:
        """The bookie is stopping: no more background re-registrations."""
        self._closed = True
        for task in list(self._background):
            task.cancel()

    async def unregister(self) -> None:
        """Remove the registration (errors ignored)."""
        if self._metadata is not None:
            for path in (f"{AVAILABLE_PATH}/{self.bookie_id}", f"{READONLY_PATH}/{self.bookie_id}"):
                with contextlib.suppress(Exception):
                    await self._metadata.delete(path)
