"""The compiled record encoders (``magnetar.protocol._crecords``) give exactly the bytes of
the pure-Python encoders of the journal and the entry log, on generated runs; the test
environment builds them; what they write reads back through the replay and read paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.bookie import entry_log, journal
from magnetar.bookie.entry_log import EntryLogger
from magnetar.common import crc32c
from magnetar.protocol import speedups

CRECORDS = speedups.CRECORDS
U64 = st.integers(0, (1 << 64) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U32 = st.integers(0, (1 << 32) - 1)

runs = st.integers(0, 40).flatmap(
    lambda n: st.tuples(
        st.one_of(U64, st.lists(U64, min_size=n, max_size=n)),
        st.one_of(st.integers(-1, 1 << 40), st.lists(I64, min_size=n, max_size=n)),
        st.one_of(I64, st.lists(I64, min_size=n, max_size=n)),
        st.lists(U32, min_size=n, max_size=n),
        st.lists(st.binary(max_size=300), min_size=n, max_size=n),
    )
)


def _columns(
    ledgers: int | list[int], entries: int | list[int], lacs: int | list[int], n: int
) -> tuple[list[int], list[int], list[int]]:
    return (
        [ledgers] * n if isinstance(ledgers, int) else ledgers,
        list(range(entries, entries + n)) if isinstance(entries, int) else entries,
        [lacs] * n if isinstance(lacs, int) else lacs,
    )


@pytest.mark.parametrize(
    "first_import",
    ["magnetar.bookie", "magnetar.protocol.speedups", "magnetar.cli.main"],
)
def test_the_test_environment_builds_the_compiled_module(first_import: str) -> None:
    """Whatever a process imports first (the bookie package, the codec, the command line),
    the journal and the entry log bind the compiled encoders."""
    assert CRECORDS is not None
    code = (
        f"import {first_import};"
        "from magnetar.bookie import entry_log, journal;"
        "print(journal.CRECORDS is not None,"
        " entry_log.encode_records is journal.CRECORDS.entry_log_records)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def test_pure_python_is_chosen_by_the_environment_variable() -> None:
    code = (
        "from magnetar.bookie import entry_log; from magnetar.protocol import speedups;"
        "print(speedups.CRECORDS is None, entry_log.encode_records is entry_log.py_encode_records)"
    )
    env = {**os.environ, speedups.PURE_PYTHON_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"]


@settings(max_examples=500, deadline=None)
@given(run=runs, type_=st.sampled_from([1, 2]), file_id=st.integers(0, 2**64 - 1))
def test_journal_records_match_the_pure_python_encoder(
    run: tuple[int | list[int], int | list[int], int | list[int], list[int], list[bytes]],
    type_: int,
    file_id: int,
) -> None:
    assert CRECORDS is not None
    ledgers, entries, lacs, checksums, payloads = run
    columns = _columns(ledgers, entries, lacs, len(payloads))
    expected = b"".join(journal.record_parts(file_id, type_, *columns, checksums, payloads))
    got = CRECORDS.journal_records(file_id, type_, ledgers, entries, lacs, checksums, payloads)
    assert got == expected
    parts = journal.record_parts(file_id, type_, ledgers, entries, lacs, checksums, payloads)
    assert b"".join(parts) == expected
    # the same bytes written into a buffer at an offset, the rest of it untouched
    at = len(payloads) * 7
    buffer = bytearray(b"\xaa" * (at + len(expected) + 5))
    end = CRECORDS.journal_records_into(
        buffer, at, file_id, type_, ledgers, entries, lacs, checksums, payloads
    )
    assert end == at + len(expected)
    assert buffer == b"\xaa" * at + expected + b"\xaa" * 5


@settings(max_examples=500, deadline=None)
@given(run=runs)
def test_entry_log_records_match_the_pure_python_encoder(
    run: tuple[int | list[int], int | list[int], int | list[int], list[int], list[bytes]],
) -> None:
    assert CRECORDS is not None
    ledgers, entries, lacs, checksums, payloads = run
    expected = entry_log.py_encode_records(ledgers, entries, lacs, checksums, payloads)
    assert CRECORDS.entry_log_records(ledgers, entries, lacs, checksums, payloads) == expected
    columns = _columns(ledgers, entries, lacs, len(payloads))
    assert entry_log.py_encode_records(*columns, checksums, payloads) == expected


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1, 0, 0, [1, 2], [b"a"]), ValueError),  # columns of different lengths
        (([1], 0, 0, [1, 2], [b"a", b"b"]), ValueError),
        ((-1, 0, 0, [1], [b"a"]), OverflowError),  # a ledger id is unsigned
        ((1, 0, 0, [1 << 32], [b"a"]), OverflowError),  # a checksum is 32 bits
        ((1, 0, 0, [1], [7]), TypeError),  # a payload is bytes-like
        ((1, 0, 0, 5, [b"a"]), TypeError),  # checksums are a sequence
    ],
)
def test_bad_columns_raise(args: tuple[object, ...], error: type[Exception]) -> None:
    assert CRECORDS is not None
    with pytest.raises(error):
        CRECORDS.entry_log_records(*args)
    with pytest.raises(error):
        CRECORDS.journal_records(1, 1, *args)
    with pytest.raises(ValueError):
        CRECORDS.journal_records(1, 256, 1, 0, 0, [1], [b"a"])
    with pytest.raises(OverflowError):  # a file id is a u64
        CRECORDS.journal_records(-1, 1, 1, 0, 0, [1], [b"a"])
    with pytest.raises(error):
        CRECORDS.journal_records_into(bytearray(100), 0, 1, 1, *args)


def test_records_that_do_not_fit_the_buffer_there_are_refused_and_nothing_written() -> None:
    assert CRECORDS is not None
    payload = b"x" * 10
    size = len(CRECORDS.journal_records(1, 1, 1, 0, 0, [1], [payload]))
    buffer = bytearray(size + 3)
    for at in (4, size + 4, -1):
        with pytest.raises(ValueError, match="do not fit"):
            CRECORDS.journal_records_into(buffer, at, 1, 1, 1, 0, 0, [1], [payload])
    assert buffer == bytearray(size + 3)
    assert CRECORDS.journal_records_into(buffer, 3, 1, 1, 1, 0, 0, [1], [payload]) == size + 3
    with pytest.raises(BufferError):  # read-only
        CRECORDS.journal_records_into(bytes(size), 0, 1, 1, 1, 0, 0, [1], [payload])
    with pytest.raises(TypeError):
        CRECORDS.journal_records_into(buffer, 0, 1, 1, 1, 0, 0, [1])


def test_records_written_by_the_compiled_encoder_read_back(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path / "entrylogs")
    payloads = [bytes([i]) * (10 + i) for i in range(50)]
    checksums = [crc32c.crc32c(p) for p in payloads]
    locations = logger.add_run(7, 100, 99, checksums, payloads)
    logger.write_frozen(logger.freeze())
    for i, location in enumerate(locations):
        stored = logger.read_file(location)
        assert (stored.ledger_id, stored.entry_id, stored.payload) == (7, 100 + i, payloads[i])
