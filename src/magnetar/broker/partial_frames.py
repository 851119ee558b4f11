"""The broker-wide budget of bytes held in partially read frames, sans I/O.

A frame's bytes are held by its connection's decoder from its first byte to its last. One
connection holds at most one partial frame (at most the frame-size limit, 5 MiB + 10 KiB
by default), but many connections together could hold any amount: a client that announces
a large frame and sends it slowly, or not at all, costs the broker memory for nothing.
Pulsar bounds the bytes of publishes in flight broker-wide (``maxMessagePublishBufferSizeInMB``)
and stops reading from connections past it; this budget does the same for bytes still
being read, and gives every partial frame a deadline so bytes held by a client that
stopped sending are freed (its connection is closed).

The connections are *readers* here: :meth:`PartialFrameBudget.hold` records what one
holds after each read and says whether it must stop reading; :meth:`resumable` names the
stopped readers that may read again; :meth:`expired` names the readers whose partial frame
is overdue. The caller does the I/O (pause, resume, close) and reads the clock.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R")

DEFAULT_PARTIAL_FRAME_BYTES_MAX = 64 * 1024 * 1024
"""Default broker-wide bound of bytes held in partially read frames (a dozen frames of
the largest default size in flight at once)."""

DEFAULT_PARTIAL_FRAME_TIMEOUT_MS = 30_000
"""Default time a frame may take from its first byte to its last (the keep-alive
interval: a client that needs longer to send one frame is as good as gone)."""


class PartialFrameBudget(Generic[R]):
    """Bytes held in partial frames by every reader, against ``bytes_max``.

    A reader past the budget is not refused: it keeps the bytes it holds and stops
    reading (it is queued). Queued readers resume, in the order they stopped, once the
    total is below ``bytes_max`` again: when frames complete, connections end, or overdue
    frames are dropped (:meth:`expired`). A reader holding no bytes never has to stop (a
    read that ends on a frame boundary holds nothing).

    Progress: the reader whose partial frame began first never stops, so some frame
    always completes (or becomes overdue) and frees its bytes, even when a single frame is
    larger than the whole budget; stopped readers alone could otherwise wait on each
    other until their deadlines. The total is thus bounded by ``bytes_max`` plus one
    frame, plus what each reader read in the one read that took it over.
    """

    __slots__ = ("_held", "_started_s", "_total", "_waiting", "bytes_max", "timeout_ms")

    def __init__(
        self,
        bytes_max: int = DEFAULT_PARTIAL_FRAME_BYTES_MAX,
        timeout_ms: int = DEFAULT_PARTIAL_FRAME_TIMEOUT_MS,
    ) -> None:
        if bytes_max <= 0 or timeout_ms <= 0:
            raise ValueError("bytes_max and timeout_ms must be positive")
        self.bytes_max = bytes_max
        self.timeout_ms = timeout_ms
        self._held: dict[R, int] = {}
        self._started_s: dict[R, float] = {}  # holders, in the order their frames began
        self._waiting: dict[R, None] = {}  # stopped readers, in the order they stopped
        self._total = 0

    @property
    def held_bytes(self) -> int:
        """Bytes held in partial frames by all readers."""
        return self._total

    @property
    def waiting(self) -> int:
        """Readers stopped by the budget (not yet named by :meth:`resumable`)."""
        return len(self._waiting)

    def hold(self, reader: R, held_bytes: int, frame_started_s: float | None) -> bool:
        """Record that ``reader`` now holds ``held_bytes`` of a partial frame (0: none).

        ``frame_started_s`` is the (monotonic) clock reading when a *new* partial frame
        began with this read, None when it is the same frame as at the previous call (or
        there is none); frames are ordered by when this was called, so readings must not
        decrease from call to call. Returns True when the reader must stop reading: it holds bytes and the total
        exceeds ``bytes_max``; it is then queued for :meth:`resumable`.
        """
        before = self._held.get(reader, 0)
        if held_bytes:
            self._held[reader] = held_bytes
            if frame_started_s is not None:
                self._started_s.pop(reader, None)  # to the end: the newest frame
                self._started_s[reader] = frame_started_s
            assert reader in self._started_s, "a new partial frame needs its start time"
        else:
            self._held.pop(reader, None)
            self._started_s.pop(reader, None)
        self._total += held_bytes - before
        if held_bytes and self._total > self.bytes_max and reader is not self._oldest():
            self._waiting[reader] = None
            return True
        return False

    def _oldest(self) -> R | None:
        """The reader whose partial frame began first."""
        return next(iter(self._started_s), None)

    def release(self, reader: R) -> None:
        """Forget ``reader`` (its connection ended; its bytes are freed)."""
        self._total -= self._held.pop(reader, 0)
        self._started_s.pop(reader, None)
        self._waiting.pop(reader, None)

    def resumable(self) -> list[R]:
        """The stopped readers that may read again (removed from the queue): all of them,
        in the order they stopped, once the total is below ``bytes_max``; else the one
        whose frame began first, if it is stopped (it became the oldest)."""
        if not self._waiting:
            return []
        if self._total < self.bytes_max:
            readers = list(self._waiting)
            self._waiting.clear()
            return readers
        oldest = self._oldest()
        if oldest is None or oldest not in self._waiting:
            return []
        del self._waiting[oldest]
        return [oldest]

    def expired(self, now_s: float) -> list[R]:
        """Readers whose partial frame began more than ``timeout_ms`` before ``now_s``
        (stopped readers included: a frame's deadline does not move while it waits)."""
        deadline_s = now_s - self.timeout_ms / 1000
        return [r for r, started in self._started_s.items() if started < deadline_s]
