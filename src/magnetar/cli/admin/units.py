"""Sizes and durations with unit suffixes, as ``pulsar-admin`` reads them.

* sizes: ``10``, ``10K``, ``16M``, ``2G``, ``3T`` (binary multiples; bare numbers are bytes);
  ``-1`` means unlimited;
* durations: ``30``, ``30s``, ``100m``, ``3h``, ``2d``, ``5w``, ``1y`` (bare numbers are
  seconds, or milliseconds for :func:`duration_ms`); ``-1`` means unlimited.

Malformed values are usage errors (:class:`click.BadParameter`).
"""

from __future__ import annotations

import re

import click

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_PATTERN = re.compile(r"^\s*(-?\d+)\s*([a-zA-Z]?)\s*$")


def size_bytes(text: str) -> int:
    m = _PATTERN.match(text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise click.BadParameter(f"invalid size {text!r} (examples: 1024, 10M, 2G, -1)")
    n = int(m.group(1))
    return -1 if n < 0 else n * _SIZE_UNITS[m.group(2).lower()]


def duration_s(text: str) -> int:
    m = _PATTERN.match(text)
    if not m or m.group(2).lower() not in _TIME_UNITS:
        raise click.BadParameter(f"invalid duration {text!r} (examples: 30, 100m, 3h, 2d, -1)")
    n = int(m.group(1))
    return -1 if n < 0 else n * _TIME_UNITS[m.group(2).lower()]


def duration_ms(text: str) -> int:
    """A duration in milliseconds: bare numbers are milliseconds (``pulsar-admin``'s
    ``TimeUnitToMillisConverter``), suffixed ones as :func:`duration_s`."""
    m = _PATTERN.match(text)
    if m and not m.group(2):
        n = int(m.group(1))
        return -1 if n < 0 else n
    seconds = duration_s(text)
    return -1 if seconds < 0 else seconds * 1000
