"""Where a bookie stored each entry of one ledger: entry id -> (location, record size).

A bookie's index lives in memory (persisted at checkpoints, see
:mod:`magnetar.bookie.ledger_storage`), one :class:`EntryIndex` per ledger, so its cost per
entry is the bookie's memory per stored entry of every ledger in use (idle ones spill, below). Two ``dict``\\ s of
``int`` cost about 150 bytes an entry (measured: 37 MB for the 250 000 entries of one pass of
``benchmarks/broker.py``, held until the topics' ledgers rolled over); here an entry costs
12 bytes: entry ids of a ledger are dense (0, 1, 2, ... as the writer numbers them; a bookie
of a striped ensemble holds a regular subset), so they index two arrays directly.

Entry ids far beyond the end (more than :data:`GAP_MAX_ENTRIES` past it: only a broken or
hostile writer sends those) go to a small dict instead, so one request cannot make the
arrays grow by gigabytes.

Idle ledgers' arrays leave memory (BookKeeper's interleaved storage keeps its per-ledger
index on disk with a bounded cache in memory, DbLedgerStorage in RocksDB): a writer thread
puts them in a *spill file* (:meth:`EntryIndex.write_spill`), the loop then drops them
(:meth:`EntryIndex.drop_arrays`, refused if an entry changed meanwhile), and the next use
reads them back (one read of 12 bytes an entry). A spill file is a cache, never needed for
durability: the index files of :mod:`magnetar.bookie.ledger_storage` are, and a restart
removes every spill file. Without this, a bookie's memory grew with every entry of every
ledger not yet deleted (the topics of each pass of ``benchmarks/broker.py`` kept ~15 MB
until their ledgers rolled over, were trimmed and collected, minutes later).

Plain data structure, not thread-safe (the event loop owns it; :meth:`EntryIndex.write_spill`
only reads it, from a thread, and :meth:`EntryIndex.drop_arrays` checks nothing changed).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress
from pathlib import Path
from typing import Final

from magnetar.common.frozen_struct import frozen_struct

GAP_MAX_ENTRIES: Final = 65_536
"""Entry ids more than this past the arrays' end are kept in the sparse dict."""
_ABSENT: Final = -1
"""Location of an id inside the arrays that this bookie does not hold (locations are >= 0)."""


@frozen_struct(kw_only=False)
class SpillFile:
    """An :class:`EntryIndex`'s arrays in a file: ``length`` locations (``q``), then as many
    sizes (``I``), as they were at mutation ``version``."""

    path: Path
    length: int
    version: int
    last_entry_id: int


class EntryIndex:
    """entry id -> ``(location, size)`` for the entries of one ledger this bookie holds."""

    __slots__ = (
        "_count",
        "_kept",
        "_locations",
        "_size_total",
        "_sizes",
        "_sparse",
        "_spilled",
        "_version",
        "idle_scans",
        "touched",
    )

    def __init__(self) -> None:
        self._locations = array("q")
        """Location of entry id ``i`` at index ``i`` (``_ABSENT`` where not held)."""
        self._sizes = array("I")
        """Record size (header + payload) of entry id ``i``."""
        self._sparse: dict[int, tuple[int, int]] = {}
        """Entries with ids far past the arrays (see the module docstring)."""
        self._count = 0
        self._size_total = 0
        self._version = 0
        """Bumped by every change of the arrays or the sparse dict."""
        self._spilled: SpillFile | None = None
        """Where the arrays are while they are out of memory (then both are empty)."""
        self._kept: SpillFile | None = None
        """The file the arrays were read back from: still equal to them while its version
        is :attr:`_version` (dropping them again then needs no write)."""
        self.touched = False
        """Set by every lookup and change; the owner's idle scans clear it."""
        self.idle_scans = 0
        """Idle scans in a row that found it untouched (kept by the owner)."""

    def __len__(self) -> int:
        """Entries held."""
        return self._count

    @property
    def size_total(self) -> int:
        """Sum of the record sizes of the entries held."""
        return self._size_total

    def get(self, entry_id: int) -> int | None:
        """The location of ``entry_id``, or None if not held. Reads spilled arrays back
        (``OSError`` if their file cannot be read; nothing changes then)."""
        self.touched = True
        if self._spilled is not None:
            self.read_back()
        if 0 <= entry_id < len(self._locations):
            location = self._locations[entry_id]
            return None if location == _ABSENT else location
        found = self._sparse.get(entry_id)
        return None if found is None else found[0]

    def put(self, entry_id: int, location: int, size: int) -> tuple[int, int] | None:
        """Record where ``entry_id`` is stored; returns the ``(location, size)`` it replaces
        (an entry written again, or copied by compaction), or None."""
        assert location >= 0 and size >= 0, (location, size)
        self.touched = True
        if self._spilled is not None:
            self.read_back()
        self._version += 1
        locations = self._locations
        end = len(locations)
        if 0 <= entry_id < end:
            old_location = locations[entry_id]
            locations[entry_id] = location
            old_size = self._sizes[entry_id]
            self._sizes[entry_id] = size
            if old_location != _ABSENT:
                self._size_total += size - old_size
                return old_location, old_size
        elif end <= entry_id <= end + GAP_MAX_ENTRIES:
            if entry_id > end:
                gap = entry_id - end
                locations.extend(array("q", [_ABSENT]) * gap)
                self._sizes.extend(array("I", [0]) * gap)
            locations.append(location)
            self._sizes.append(size)
            self._adopt_sparse()
        else:
            old = self._sparse.get(entry_id)
            self._sparse[entry_id] = (location, size)
            if old is not None:
                self._size_total += size - old[1]
                return old
        self._count += 1
        self._size_total += size
        return None

    def put_run(
        self, first_entry_id: int, locations: Sequence[int], sizes: Sequence[int]
    ) -> list[tuple[int, int]]:
        """:meth:`put` of entries ``first_entry_id``, ``+1``, ... (``locations[i]`` and
        ``sizes[i]`` of the i-th); returns the ``(location, size)`` pairs they replace, in
        order (usually none). A run that starts at the arrays' end, with nothing sparse,
        extends them at once (the writer's usual case)."""
        self.touched = True
        if self._spilled is not None:
            self.read_back()
        if first_entry_id == len(self._locations) and not self._sparse:
            self._version += 1
            self._locations.extend(locations)
            self._sizes.extend(sizes)
            self._count += len(locations)
            self._size_total += sum(sizes)
            return []
        replaced = []
        for i, (location, size) in enumerate(zip(locations, sizes, strict=True)):
            old = self.put(first_entry_id + i, location, size)
            if old is not None:
                replaced.append(old)
        return replaced

    def _adopt_sparse(self) -> None:
        """Move sparse entries the arrays now reach into them (rare: only after a gap).
        Each adopted entry grows the arrays and so their reach: repeat until no sparse entry
        is within it, so that no sparse id is ever below the arrays' end (an id there would
        be looked up, replaced and counted in the arrays while its sparse copy lingered)."""
        sparse = self._sparse
        while sparse:
            reach = len(self._locations) + GAP_MAX_ENTRIES
            near = sorted(e for e in sparse if 0 <= e <= reach)
            if not near:
                return
            for entry_id in near:  # ascending, each at or past the end the previous left
                location, size = sparse.pop(entry_id)
                gap = entry_id - len(self._locations)
                if gap > 0:
                    self._locations.extend(array("q", [_ABSENT]) * gap)
                    self._sizes.extend(array("I", [0]) * gap)
                self._locations.append(location)
                self._sizes.append(size)

    def items(self) -> Iterator[tuple[int, int, int]]:
        """``(entry id, location, size)`` of every entry held, array part in id order."""
        if self._spilled is not None:
            self.read_back()
        sizes = self._sizes
        for entry_id, location in enumerate(self._locations):
            if location != _ABSENT:
                yield entry_id, location, sizes[entry_id]
        for entry_id, (location, size) in self._sparse.items():
            yield entry_id, location, size

    def columns(self) -> tuple[Iterable[int], Iterable[int], Iterable[int]]:
        """The entries of :meth:`items` as three parallel iterables (ids, locations,
        sizes), for ``map`` over a C function without a Python call per entry."""
        if self._spilled is not None:
            self.read_back()
        locations = self._locations
        ids: Iterable[int] = range(len(locations))
        locs: Iterable[int] = locations
        sizes: Iterable[int] = self._sizes
        if self._count - len(self._sparse) != len(locations):  # holes in the arrays
            ids = compress(ids, map(_ABSENT.__ne__, locations))
            locs = compress(locs, map(_ABSENT.__ne__, locations))
            sizes = compress(sizes, map(_ABSENT.__ne__, locations))
        if self._sparse:
            sparse = sorted(self._sparse.items())
            ids = chain(ids, (e for e, _ in sparse))
            locs = chain(locs, (loc for _, (loc, _) in sparse))
            sizes = chain(sizes, (size for _, (_, size) in sparse))
        return ids, locs, sizes

    def copy(self) -> EntryIndex:
        """An independent copy: of an index with a :attr:`spill_file`, a spilled index
        sharing that file (the owner keeps the file until the copy has been read); else
        the arrays are copied in C (~12 bytes an entry)."""
        other = EntryIndex()
        other._sparse = dict(self._sparse)
        other._count = self._count
        other._size_total = self._size_total
        spill = self.spill_file
        if spill is not None:
            other._spilled = spill
        else:
            other._locations = array("q", self._locations)
            other._sizes = array("I", self._sizes)
        return other

    @property
    def last_entry_id(self) -> int:
        """The highest entry id held, or -1."""
        if self._spilled is not None:
            return self._spilled.last_entry_id
        last = max(self._sparse, default=-1)
        locations = self._locations
        for entry_id in range(len(locations) - 1, max(last, -1), -1):
            if locations[entry_id] != _ABSENT:
                return entry_id
        return last

    # -- spilling ---------------------------------------------------------------------------

    @property
    def spilled(self) -> bool:
        """The arrays are out of memory (in :attr:`spill_file`)."""
        return self._spilled is not None

    @property
    def spill_file(self) -> SpillFile | None:
        """The file holding the arrays, or the one they were read back from while it still
        equals them (the owner removes neither: see :meth:`stale_spill`)."""
        if self._spilled is not None:
            return self._spilled
        kept = self._kept
        return kept if kept is not None and kept.version == self._version else None

    def stale_spill(self) -> Path | None:
        """A file this index was read back from and changed since: no longer needed by
        it (forgotten here; the owner removes it once no copy can read it)."""
        kept = self._kept
        if kept is None or kept.version == self._version:
            return None
        self._kept = None
        return kept.path

    def write_spill(self, path: Path) -> SpillFile:
        """Worker thread: write the arrays to ``path`` as they are now (they may change
        meanwhile: :meth:`drop_arrays` then refuses the file). Raises ``OSError``."""
        version = self._version
        locations = self._locations
        length = len(locations)
        last = self.last_entry_id
        with path.open("wb") as f:
            # tofile copies a block at a time from the array's current buffer: safe while
            # the loop appends (and reallocates); any change bumps the version.
            locations.tofile(f)
            self._sizes.tofile(f)
        return SpillFile(path, length, version, last)

    def drop_arrays(self, spill: SpillFile) -> bool:
        """Loop: hand the arrays over to ``spill`` (from :meth:`write_spill`, or
        :attr:`spill_file`) and free them, unless they changed since it was written."""
        if self._spilled is not None or spill.version != self._version:
            return False
        if spill.length != len(self._locations):
            return False
        self._spilled = spill
        self._kept = None
        self._locations = array("q")
        self._sizes = array("I")
        return True

    def read_back(self) -> None:
        """Read spilled arrays back into memory, if spilled (every lookup and change does
        it first; call it where an ``OSError`` must come early). ``OSError`` if the file
        cannot be read: the index then stays spilled."""
        spill = self._spilled
        if spill is None:
            return
        locations = array("q")
        sizes = array("I")
        split = spill.length * locations.itemsize
        data = spill.path.read_bytes()
        if len(data) != split + spill.length * sizes.itemsize:
            raise OSError(f"spill file {spill.path} holds {len(data)} bytes, not as written")
        with memoryview(data) as view:
            locations.frombytes(view[:split])
            sizes.frombytes(view[split:])
        self._locations = locations
        self._sizes = sizes
        self._spilled = None
        self._kept = spill
