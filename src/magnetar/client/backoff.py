"""Exponential backoff with jitter, sans I/O: ask for the next delay, reset on success."""

from __future__ import annotations

import random


class Backoff:
    """Delays ``initial_ms, 2*initial_ms, ...`` capped at ``max_ms``, each with up to 10 %
    random jitter subtracted (so reconnecting clients spread out). Deterministic under an
    injected ``rng``."""

    __slots__ = ("_next_ms", "_rng", "initial_ms", "max_ms")

    def __init__(
        self, initial_ms: int = 100, max_ms: int = 30_000, rng: random.Random | None = None
    ) -> None:
        if initial_ms <= 0 or max_ms < initial_ms:
            raise ValueError("need 0 < initial_ms <= max_ms")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self._next_ms = initial_ms
        self._rng = rng if rng is not None else random.Random()

    def next_ms(self) -> int:
        """The delay to wait before the next attempt; doubles the following one."""
        current = self._next_ms
        self._next_ms = min(self.max_ms, current * 2)
        jitter = int(current * 0.1 * self._rng.random())
        return max(1, current - jitter)

    def reset(self) -> None:
        """Call after a successful attempt."""
        self._next_ms = self.initial_ms
