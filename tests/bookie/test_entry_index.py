"""The bookie's per-ledger entry index: the same answers as a dict, at a fraction of the
memory per entry (it is held for every stored entry until its ledger is deleted)."""

from __future__ import annotations

import tracemalloc
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.bookie import entry_log, ledger_storage
from magnetar.bookie.entry_index import GAP_MAX_ENTRIES, EntryIndex
from magnetar.bookie.entry_log import log_of
from magnetar.bookie.journal import JournalPosition
from magnetar.bookie.ledger_storage import LedgerStorage

INDEX_BYTES_PER_ENTRY_MAX = 24
# The index rewrite's chunk in the memory tests: their bounds scale with it, and a smaller
# one lets them hold a few times a chunk with fewer entries (the product's is 64 Ki records).
SMALL_CHUNK_RECORDS = 8 * 1024
"""Two dicts of ints took ~150 bytes an entry; the arrays take 12 (plus their growth slack)."""

entry_ids = st.one_of(
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=-5, max_value=3 * GAP_MAX_ENTRIES),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(entry_ids, st.integers(0, 1 << 50), st.integers(0, 1 << 20))))
def test_answers_as_a_dict_would(puts: list[tuple[int, int, int]]) -> None:
    index = EntryIndex()
    model: dict[int, tuple[int, int]] = {}
    for entry_id, location, size in puts:
        assert index.put(entry_id, location, size) == model.get(entry_id)
        model[entry_id] = (location, size)
    assert len(index) == len(model)
    assert index.size_total == sum(size for _, size in model.values())
    assert sorted(index.items()) == sorted((e, loc, size) for e, (loc, size) in model.items())
    assert sorted(zip(*index.columns(), strict=True)) == sorted(index.items())
    copied = index.copy()
    assert sorted(copied.items()) == sorted(index.items()) and len(copied) == len(index)
    copied.put(0, 1, 1)  # the copy is independent
    assert index.get(0) == (model[0][0] if 0 in model else None)
    assert index.last_entry_id == max(model, default=-1)
    for entry_id, _location, _size in puts:
        assert index.get(entry_id) == model[entry_id][0]
    for absent in (-7, 301, 3 * GAP_MAX_ENTRIES + 1):
        assert index.get(absent) == (model[absent][0] if absent in model else None)


def test_sparse_entries_brought_within_reach_one_after_another_are_all_adopted() -> None:
    """Two far entries, then entry 0: adopting the first far one brings the second within
    reach. It stayed sparse below the arrays' end, so the next put of an id past it landed
    one slot off and a put of it again was counted twice (found by the property test)."""
    far = GAP_MAX_ENTRIES + 1
    index = EntryIndex()
    for entry_id in (far, far + 1, 0, far + 2):
        assert index.put(entry_id, entry_id, 1) is None
    assert sorted(index.items()) == [(e, e, 1) for e in (0, far, far + 1, far + 2)]
    assert [index.get(e) for e in (far, far + 1, far + 2)] == [far, far + 1, far + 2]
    assert index.put(far + 1, 7, 2) == (far + 1, 1)
    assert len(index) == 4 and index.size_total == 5


def test_a_far_entry_id_does_not_grow_the_arrays() -> None:
    index = EntryIndex()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index.put(1 << 40, 5, 10)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4096
    assert index.get(1 << 40) == 5 and index.last_entry_id == 1 << 40


def test_storage_holds_little_per_entry_after_a_checkpoint(tmp_path: Path) -> None:
    """What ``LedgerStorage`` keeps per stored entry once a checkpoint wrote the entries to
    the entry log (the write buffers are dropped then; the index stays until the ledger is
    deleted, so this is the bookie's memory per entry it holds)."""
    storage = LedgerStorage(tmp_path)
    storage.load()
    payload = b"p" * 100
    entries = 30_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for entry_id in range(entries):
            storage.add_entry(7, entry_id, entry_id - 1, 0, payload)
        job = storage.begin_checkpoint(JournalPosition(1, 0))
        storage.run_checkpoint_io(job)
        storage.finish_checkpoint(job)
        del job
        pooled = sum(len(segment) for segment in storage.entry_logger._segment_pool)
        assert pooled <= entry_log.SEGMENT_POOL_MAX * entry_log._SEGMENT_CAPACITY
        held = tracemalloc.get_traced_memory()[0] - before - pooled  # (a fixed 2 MiB)
    finally:
        tracemalloc.stop()
    rec = storage.ledgers[7]
    assert len(rec.entries) == entries and rec.last_entry_id == entries - 1
    assert rec.size_bytes == entries * len(payload)
    assert storage.location(7, entries - 1) is not None
    assert held / entries < INDEX_BYTES_PER_ENTRY_MAX, f"{held / entries:.0f} bytes an entry"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            entry_ids,
            st.lists(
                st.tuples(st.integers(0, 1 << 50), st.integers(0, 1 << 20)), min_size=1, max_size=20
            ),
        )
    )
)
def test_runs_answer_as_puts_one_by_one_would(
    runs: list[tuple[int, list[tuple[int, int]]]],
) -> None:
    by_runs = EntryIndex()
    one_by_one = EntryIndex()
    for first, entries in runs:
        expected = [
            old
            for i, (location, size) in enumerate(entries)
            if (old := one_by_one.put(first + i, location, size)) is not None
        ]
        locations = [location for location, _ in entries]
        sizes = [size for _, size in entries]
        assert by_runs.put_run(first, locations, sizes) == expected
    assert len(by_runs) == len(one_by_one)
    assert by_runs.size_total == one_by_one.size_total
    assert sorted(by_runs.items()) == sorted(one_by_one.items())
    assert by_runs.last_entry_id == one_by_one.last_entry_id


def live_bytes_recounted(storage: LedgerStorage) -> dict[int, int]:
    """Every log's live bytes counted from the index, entry by entry."""
    live: dict[int, int] = dict.fromkeys(storage.log_live_bytes, 0)
    for rec in storage.ledgers.values():
        for _entry, location, size in rec.entries.items():
            live[log_of(location)] = live.get(log_of(location), 0) + size
    return live


def test_live_bytes_per_log_hold_through_rewrites_rolls_and_deletes(tmp_path: Path) -> None:
    """A deleted ledger's bytes leave the logs' live bytes by its per-log totals (not entry by
    entry); those totals stay right when entries are stored again, when a run of adds
    spans a log roll, and across a restart; the rewritten index (packed off the loop from
    copies) loads back as it was."""
    storage = LedgerStorage(tmp_path, log_size_max_bytes=4096)
    storage.load()
    payload = b"p" * 100
    for ledger in (1, 2, 3):
        for first in range(0, 120, 30):  # runs of 30 entries: several cross a roll
            storage.add_entries(ledger, first, first - 1, [0] * 30, [payload] * 30)
    storage.add_entries(2, 10, 9, [0] * 5, [b"again" * 40] * 5)  # stored again
    assert len(storage.log_live_bytes) > 3
    assert storage.log_live_bytes == live_bytes_recounted(storage)
    storage.delete_ledgers([1, 3])
    assert storage.log_live_bytes == live_bytes_recounted(storage)
    assert sum(storage.log_live_bytes.values()) == storage.ledgers[2].entries.size_total
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    assert job.rewrite and job.snapshot is not None
    storage.add_entries(2, 120, 119, [0], [payload])  # after the snapshot: not in it
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)
    held = sorted(storage.ledgers[2].entries.items())
    storage.close()

    again = LedgerStorage(tmp_path, log_size_max_bytes=4096)
    again.load()
    assert sorted(again.ledgers) == [2]
    assert sorted(again.ledgers[2].entries.items()) == held[:-1]  # 120 waits for the journal
    assert again.log_live_bytes == live_bytes_recounted(again)
    again.close()


def _peak_of_an_index_rewrite(storage: LedgerStorage) -> int:
    """Run a checkpoint that rewrites the whole index; the peak of traced memory meanwhile."""
    tracemalloc.start()
    try:
        job = storage.begin_checkpoint(JournalPosition(1, 0))
        assert job.rewrite
        storage.run_checkpoint_io(job)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    storage.finish_checkpoint(job)
    return peak


def test_a_checkpoint_rewriting_the_whole_index_holds_only_a_chunk_of_what_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a garbage collection a checkpoint rewrites the whole index file: the loop
    copies the entry arrays (12 bytes an entry), the checkpoint's thread packs the records
    (29 bytes an entry) and writes them a chunk at a time. Building one ``bytes`` per record
    and joining them peaked at 179 bytes an entry (a ~110 MB spike of the standalone's
    resident memory in `benchmarks/broker.py --repeat 3`), and the whole generation packed
    in one buffer still at 29 (~100 MB after three passes). The rewritten index still loads
    to the same entries."""
    monkeypatch.setattr(ledger_storage, "_REWRITE_CHUNK_RECORDS", SMALL_CHUNK_RECORDS)
    storage = LedgerStorage(tmp_path)
    storage.load()
    entries = 4 * ledger_storage._REWRITE_CHUNK_RECORDS + 123
    for entry_id in range(entries):
        storage.add_entry(7, entry_id, entry_id - 1, 0, b"p")
    storage.add_entry(8, 0, -1, 0, b"gone")
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)
    del job
    storage.delete_ledgers([8])  # the next checkpoint rewrites the index
    peak = _peak_of_an_index_rewrite(storage)
    index_bytes = storage._state.index_length
    assert index_bytes == (entries + 1) * 29  # and the ledger record
    chunk_bytes = ledger_storage._REWRITE_CHUNK_RECORDS * 29
    assert peak < entries * 12 * 1.2 + 2 * chunk_bytes, f"{peak / entries:.0f} B an entry"
    storage.close()
    reopened = LedgerStorage(tmp_path)
    reopened.load()
    assert set(reopened.ledgers) == {7}
    assert len(reopened.ledgers[7].entries) == entries
    assert reopened.location(7, entries - 1) == storage.location(7, entries - 1)
    reopened.close()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(entry_ids, st.integers(0, 1 << 50), st.integers(0, 1 << 20))),
    st.lists(st.tuples(entry_ids, st.integers(0, 1 << 50), st.integers(0, 1 << 20))),
)
def test_a_spilled_index_answers_as_before_and_takes_changes_after(
    tmp_path_factory: pytest.TempPathFactory,
    puts: list[tuple[int, int, int]],
    later: list[tuple[int, int, int]],
) -> None:
    """Out of memory and read back, an index gives the same answers (holes and sparse
    entries too), and changes after that land as they would have without the spill."""
    path = tmp_path_factory.mktemp("spill") / "1.ent"
    index, model = EntryIndex(), EntryIndex()
    for entry_id, location, size in puts:
        index.put(entry_id, location, size)
        model.put(entry_id, location, size)
    assert index.drop_arrays(index.write_spill(path))
    assert index.spilled and index._locations == array("q")
    assert (len(index), index.size_total) == (len(model), model.size_total)
    assert index.last_entry_id == model.last_entry_id
    copied = index.copy()  # shares the file
    assert sorted(index.items()) == sorted(model.items())
    assert not index.spilled and index.spill_file is not None  # read back, file still equal
    for entry_id, location, size in later:
        assert index.put(entry_id, location, size) == model.put(entry_id, location, size)
    assert sorted(index.items()) == sorted(model.items())
    assert (len(index), index.size_total) == (len(model), model.size_total)
    if later:
        assert index.spill_file is None and index.stale_spill() == path
    assert sorted(zip(*copied.columns(), strict=True)) == sorted(
        (e, loc, size) for e, (loc, size) in _as_dict(puts).items()
    )


def _as_dict(puts: list[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    return {entry_id: (location, size) for entry_id, location, size in puts}


def test_arrays_changed_after_their_spill_was_written_stay_in_memory(tmp_path: Path) -> None:
    """The spill file is written from a thread while adds go on: an add in between makes
    the file stale, and the arrays are not dropped for it."""
    index = EntryIndex()
    index.put_run(0, range(100, 110), [1] * 10)
    spill = index.write_spill(tmp_path / "1.ent")
    index.put_run(10, [200], [1])
    assert not index.drop_arrays(spill)
    assert index.get(10) == 200 and not index.spilled
    index.put(3, 7, 1)  # a change of an entry held, not only an append
    spill = index.write_spill(tmp_path / "2.ent")
    index.put(3, 8, 1)
    assert not index.drop_arrays(spill)


def test_a_spill_file_that_cannot_be_read_back_fails_the_lookup_and_keeps_the_index(
    tmp_path: Path,
) -> None:
    index = EntryIndex()
    index.put_run(0, range(100, 110), [1] * 10)
    path = tmp_path / "1.ent"
    assert index.drop_arrays(index.write_spill(path))
    path.write_bytes(path.read_bytes()[:20])  # short
    with pytest.raises(OSError, match="not as written"):
        index.get(3)
    path.unlink()
    with pytest.raises(OSError):
        index.put(10, 1, 1)
    assert index.spilled and len(index) == 10


def test_idle_ledgers_leave_memory_and_come_back_on_use(tmp_path: Path) -> None:
    """Ledgers idle for the scans asked for (and big enough) go to spill files; reads and
    adds bring them back; an index rewrite writes spilled ledgers from their files (they
    stay out of memory); a deleted ledger's file goes with the next checkpoint; a restart
    starts with no spill files and the same index."""
    storage = LedgerStorage(tmp_path)
    storage.load()
    n = ledger_storage.SPILL_ENTRIES_MIN
    for ledger in (1, 2, 3):
        storage.add_entries(ledger, 0, -1, [0] * n, [b"p"] * n)
    storage.add_entries(4, 0, -1, [0] * 10, [b"p"] * 10)  # too small to spill
    held = {lg: sorted(rec.entries.items()) for lg, rec in storage.ledgers.items()}
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)

    def scan() -> int:
        return storage.finish_spills(storage.write_spills(storage.spill_candidates(2)))

    assert scan() == 0  # the adds touched them all
    assert scan() == 0  # idle once
    storage.location(2, 5)  # in use
    assert scan() == 2
    spill_dir = tmp_path / "index-spill"
    assert {rec.entries.spilled for rec in storage.ledgers.values()} == {True, False}
    assert [lg for lg, rec in storage.ledgers.items() if rec.entries.spilled] == [1, 3]
    assert len(list(spill_dir.iterdir())) == 2
    assert storage.location(1, n - 1) == held[1][-1][1]  # read back on use
    assert not storage.ledgers[1].entries.spilled
    assert scan() == 0  # 2 idle once, 1 in use
    assert scan() == 1 and storage.ledgers[2].entries.spilled
    assert scan() == 0 and storage.ledgers[1].entries.spilled  # its file again: no write
    assert len(list(spill_dir.iterdir())) == 3
    file_of_1 = storage.ledgers[1].entries.spill_file
    assert file_of_1 is not None

    storage.add_entries(3, n, n - 1, [0], [b"q"])  # read back and changed: file stale
    held[3] = sorted(storage.ledgers[3].entries.items())
    storage.delete_ledgers([1])  # the next checkpoint rewrites the index
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    assert job.rewrite and job.spill_files_to_remove == [file_of_1.path]
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)
    assert storage.ledgers[2].entries.spilled  # the rewrite read its file, left it out
    assert len(list(spill_dir.iterdir())) == 2  # 3's stale file waits for a scan
    scan()
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)
    file_of_2 = storage.ledgers[2].entries.spill_file
    assert file_of_2 is not None and list(spill_dir.iterdir()) == [file_of_2.path]
    storage.close()

    again = LedgerStorage(tmp_path)
    again.load()
    assert list(spill_dir.iterdir()) == []
    del held[1]
    assert {lg: sorted(rec.entries.items()) for lg, rec in again.ledgers.items()} == held
    again.close()


def test_an_index_rewrite_reads_spilled_ledgers_back_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite's snapshot of a spilled (or read back and unchanged) ledger is its file;
    the checkpoint's thread reads each back to pack it and frees it after, so its memory
    holds about one ledger's arrays and two chunks, not every spilled index at once (kept
    in the snapshot list they all came back: +39 MB for 3 million entries)."""
    monkeypatch.setattr(ledger_storage, "_REWRITE_CHUNK_RECORDS", SMALL_CHUNK_RECORDS)
    storage = LedgerStorage(tmp_path)
    storage.load()
    ledgers, per_ledger = 30, 5_000  # each worth a spill file (SPILL_ENTRIES_MIN)
    for ledger in range(ledgers):
        for first in range(0, per_ledger, 1000):
            storage.add_entries(ledger, first, first - 1, [0] * 1000, [b"p"] * 1000)
    job = storage.begin_checkpoint(JournalPosition(1, 0))
    storage.run_checkpoint_io(job)
    storage.finish_checkpoint(job)
    for _ in range(3):
        storage.finish_spills(storage.write_spills(storage.spill_candidates(2)))
    assert all(rec.entries.spilled for rec in storage.ledgers.values())
    storage.location(1, 0)  # read back, unchanged: its copy is its file too
    storage.delete_ledgers([0])
    peak = _peak_of_an_index_rewrite(storage)
    one_ledger = per_ledger * 12
    chunk_bytes = ledger_storage._REWRITE_CHUNK_RECORDS * 29
    assert peak < 4 * one_ledger + 2 * chunk_bytes, f"{peak / one_ledger:.1f} ledgers"
    assert storage._state.index_length == (ledgers - 1) * (per_ledger + 1) * 29
    storage.close()
