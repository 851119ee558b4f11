"""How long a runtime waits before restarting a failed instance: doubling from
``initial_ms`` up to ``max_ms``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    initial_ms: int = 200
    max_ms: int = 30_000

    def __post_init__(self) -> None:
        if not 0 < self.initial_ms <= self.max_ms:
            raise ValueError("restart backoff: need 0 < initial_ms <= max_ms")

    def delay_ms(self, attempt: int) -> int:
        """The wait before restart number ``attempt + 1`` (attempt counts from 0)."""
        return min(self.max_ms, self.initial_ms << min(attempt, 30))
