"""Hand-written protobuf wire reader for golden tests (independent of the generated code).

Expected layouts are written as dicts ``{field_number: value}`` where a value is an ``int``
(varint; negative ints are written as 64-bit two's complement), ``str``/``bytes``
(length-delimited), ``float`` (64-bit double), a nested ``dict`` (length-delimited
sub-message) or a ``list`` (repeated field, one entry per occurrence).
"""

from __future__ import annotations

import struct
from typing import Any

from magnetar.protocol.varint import read_varint


def read_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """``(field_number, wire_type, raw_value)`` for every field, in wire order."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(buf, pos)
        elif wire_type == 2:
            length, pos = read_varint(buf, pos)
            value = buf[pos : pos + length]
            assert len(value) == length, "truncated length-delimited field"
            pos += length
        elif wire_type == 1:
            value = buf[pos : pos + 8]
            pos += 8
        elif wire_type == 5:
            value = buf[pos : pos + 4]
            pos += 4
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
        out.append((number, wire_type, value))
    return out


def assert_layout(buf: bytes, expected: dict[int, Any], path: str = "") -> None:
    """Check that ``buf`` holds exactly the fields of ``expected`` (see module docstring)."""
    fields = read_fields(buf)
    numbers = [n for n, _, _ in fields]
    assert numbers == sorted(numbers), f"{path}: fields not in number order: {numbers}"
    assert set(numbers) == set(expected), (
        f"{path}: fields {sorted(set(numbers))} != {sorted(expected)}"
    )
    for number, want in expected.items():
        got = [(wt, v) for n, wt, v in fields if n == number]
        wants = want if isinstance(want, list) else [want]
        assert len(got) == len(wants), f"{path}.{number}: {len(got)} occurrences, want {len(wants)}"
        for (wt, value), w in zip(got, wants, strict=True):
            where = f"{path}.{number}"
            if isinstance(w, (bool, int)):
                assert wt == 0, f"{where}: wire type {wt}, want varint"
                assert value == (int(w) & ((1 << 64) - 1)), f"{where}: {value} != {w}"
            elif isinstance(w, str):
                assert wt == 2 and value == w.encode(), f"{where}: {value!r} != {w!r}"
            elif isinstance(w, bytes):
                assert wt == 2 and value == w, f"{where}: {value!r} != {w!r}"
            elif isinstance(w, float):
                assert wt == 1 and struct.unpack("<d", value)[0] == w, f"{where}: {value!r}"
            elif isinstance(w, dict):
                assert wt == 2, f"{where}: wire type {wt}, want a sub-message"
                assert_layout(value, w, where)
            else:
                raise AssertionError(f"bad expectation {w!r}")
