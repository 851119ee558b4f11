"""The broker-wide bound of bytes of publishes in flight, sans I/O.

A SEND's entry is in the broker's memory from the moment it is read until storage answers
it (stored on the ack quorum, or failed): the producer's copy, the ledger client's
pending add, the bookie's journal and write buffers. Each connection already stops reading
past ``pending_sends_per_connection_max`` unanswered SENDs, but that is a count: 1 000
SENDs of 100 KB batches are 100 MB, and many connections multiply it. Pulsar bounds the
bytes (``maxMessagePublishBufferSizeInMB``): past the bound the broker stops reading from
every connection that publishes, and reads again once the bytes in flight fall to half of
it. Nothing is refused: the clients' SENDs wait in their own queues and in the sockets.

The connections are *readers* here. :meth:`PublishBuffer.hold` records the bytes of SENDs a
reader just handed to storage and names the readers that must stop reading now;
:meth:`PublishBuffer.release` records bytes storage answered and names the readers that may
read again. The caller does the I/O (pause and resume the transports).
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R")

DEFAULT_PUBLISH_BUFFER_SIZE_MB = 8
"""Default bound (MiB) of the bytes of publishes in flight across a broker. Pulsar's
default is half its direct memory (gigabytes); here the broker's whole resident memory is
budgeted (``magnetar standalone`` aims at under 150 MB at full load). 8 MiB still keeps the
journal's group commit fed: at 300 MB/s of entries it is 27 ms of writes, several syncs;
in ``benchmarks/broker.py`` 4, 8 and 16 MiB gave the same rates (batched 1 KiB messages,
~100 KB entries, are the only phase that reaches it), unbounded took 50 MB more at peak."""


class PublishBuffer(Generic[R]):
    """Bytes of SENDs handed to storage and not yet answered, against ``bytes_max``.

    States: *open* (every reader reads) and *full*. The total passing ``bytes_max`` makes
    it full: every reader that published since it opened stops, and a reader whose SENDs
    arrive while it is full stops after handing them over (the SENDs of one read are
    never refused, so the total can pass the bound by what the readers had read). The
    total falling to ``bytes_max // 2`` or below opens it again, and every stopped reader
    resumes. Progress needs no reading: storage answers what was handed over.

    ``bytes_max == 0`` turns the bound off (Pulsar: a negative value); the total is still
    counted.
    """

    __slots__ = ("_publishers", "_stopped", "_total", "bytes_max", "full_times")

    def __init__(self, bytes_max: int) -> None:
        if bytes_max < 0:
            raise ValueError("bytes_max must be >= 0 (0: no bound)")
        self.bytes_max = bytes_max
        self._total = 0
        self._publishers: dict[R, None] = {}  # readers that published while open
        self._stopped: dict[R, None] = {}  # readers told to stop, in that order
        self.full_times = 0
        """How many times the buffer became full (a counter for metrics)."""

    @property
    def held_bytes(self) -> int:
        """Bytes of publishes handed to storage and not yet answered, broker-wide."""
        return self._total

    @property
    def full(self) -> bool:
        """Readers that publish are stopped until the total falls to half the bound."""
        return bool(self._stopped)

    @property
    def stopped(self) -> int:
        """Readers stopped by the bound now."""
        return len(self._stopped)

    def hold(self, reader: R, size_bytes: int) -> list[R]:
        """``reader`` handed ``size_bytes`` of SENDs to storage. Returns the readers that
        must stop reading now (empty while the total is within the bound; each reader is
        named once until :meth:`release` names it again)."""
        self._total += size_bytes
        bound = self.bytes_max
        if not bound:
            return []
        stopped = self._stopped
        if stopped:  # full: this reader stops too, after what it read
            if reader in stopped:
                return []
            stopped[reader] = None
            return [reader]
        if self._total <= bound:
            self._publishers[reader] = None
            return []
        self.full_times += 1
        publishers, self._publishers = self._publishers, {}
        publishers[reader] = None
        self._stopped = publishers
        return list(publishers)

    def release(self, size_bytes: int) -> list[R]:
        """Storage answered ``size_bytes`` held before (stored or failed). Returns the
        readers that may read again (all stopped readers, once the total is at or below
        half the bound)."""
        self._total -= size_bytes
        assert self._total >= 0, "released more than was held"
        stopped = self._stopped
        if not stopped or self._total > self.bytes_max // 2:
            return []
        self._stopped = {}
        self._publishers = dict(stopped)
        return list(stopped)

    def forget(self, reader: R) -> None:
        """``reader`` went away (its connection closed): it is never named again. The
        bytes it handed over stay counted until storage answers them."""
        self._publishers.pop(reader, None)
        self._stopped.pop(reader, None)
