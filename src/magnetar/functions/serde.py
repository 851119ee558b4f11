"""The default serde of a Python function, as Pulsar's: input bytes are decoded as UTF-8
text (bytes that are not UTF-8 are passed on as bytes); the output ``str`` is encoded as
UTF-8, ``bytes`` go out unchanged, numbers and booleans as their text."""

from __future__ import annotations

from typing import Any


def deserialize_input(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def serialize_output(value: Any) -> bytes:
    """Raises TypeError for a value the default serde cannot write (say which type)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool | int | float):
        return str(value).encode("utf-8")
    raise TypeError(f"the default serde writes str, bytes and numbers, not {type(value).__name__}")
