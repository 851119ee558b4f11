"""Marker entries never reach consumers: the dispatchers drop them from what they read and
acknowledge them (Pulsar's ``Markers.isServerOnlyMarker`` check in its dispatchers).

Only topics that may hold markers (``Topic.may_hold_markers``: those with replicated
subscriptions' controller running) pay for the check, a metadata parse per entry read.
"""

from __future__ import annotations

from magnetar.common.errors import ProtocolError
from magnetar.managed_ledger.entry_run import EntryRun
from magnetar.managed_ledger.position import Position
from magnetar.protocol.entry import Entry


def is_marker(data: bytes) -> bool:
    """Whether a stored entry is a marker (a malformed entry is not: it goes on to the
    dispatcher, which handles it as before)."""
    try:
        return Entry(data).metadata.marker_type is not None
    except ProtocolError:
        return False


def drop_markers(runs: list[EntryRun]) -> tuple[list[EntryRun], list[Position]]:
    """``runs`` without their marker entries, and the markers' positions (in log order).
    Runs without markers are returned as they are; emptied runs are left out."""
    kept: list[EntryRun] = []
    markers: list[Position] = []
    for run in runs:
        flags = [is_marker(d) for d in run.data]
        if not any(flags):
            kept.append(run)
            continue
        markers.extend(p for p, f in zip(run.positions, flags, strict=True) if f)
        keep = [not f for f in flags]
        if any(keep):
            kept.append(
                EntryRun(
                    [p for p, k in zip(run.positions, keep, strict=True) if k],
                    [d for d, k in zip(run.data, keep, strict=True) if k],
                    [m for m, k in zip(run.messages, keep, strict=True) if k],
                )
            )
    return kept, markers
