"""``builtin://datagen``: a source that makes up records at a steady rate, for demos, load
tests and trying a pipeline before real data flows.

Settings (``--source-config``): ``ratePerSecond`` (records per second per instance, default
10, at most :data:`RATE_PER_SECOND_MAX`), ``count`` (records per instance, then it stays
idle; default: no end), ``seed`` (of the values' random generator, default the instance id).
Each record is a JSON object::

    {"sequence": 17, "instance": 0, "name": "person-17", "age": 42, "timestampMs": 1764000000000}

``sequence`` counts from 0 on each start of the instance.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping
from typing import Any

from magnetar.common.clock import Clock
from magnetar.functions.connectors.connector import InvalidConnectorConfig, SourceRecord, setting

RATE_PER_SECOND_MAX = 100_000.0


class DatagenSource:
    def __init__(self, config: Mapping[str, Any], *, instance_id: int, clock: Clock) -> None:
        self._rate = setting(config, "ratePerSecond", float, 10.0)
        if not 0 < self._rate <= RATE_PER_SECOND_MAX:
            raise InvalidConnectorConfig(
                f"ratePerSecond: must be above 0 and at most {RATE_PER_SECOND_MAX:g}"
            )
        self._count = setting(config, "count", int, -1)
        if self._count < -1:
            raise InvalidConnectorConfig("count: must not be negative")
        self._random = random.Random(setting(config, "seed", int, instance_id))
        self._instance_id = instance_id
        self._clock = clock
        self._sequence = 0
        self._start_s: float | None = None

    async def read(self) -> SourceRecord:
        if self._count >= 0 and self._sequence >= self._count:
            await asyncio.Event().wait()  # done: idle until stopped
        now_s = self._clock.monotonic_s()
        if self._start_s is None:
            self._start_s = now_s
        due_s = self._start_s + self._sequence / self._rate
        if due_s > now_s:
            await self._clock.sleep(due_s - now_s)
        n = self._sequence
        self._sequence += 1
        doc = {
            "sequence": n,
            "instance": self._instance_id,
            "name": f"person-{n}",
            "age": self._random.randint(18, 99),
            "timestampMs": self._clock.now_ms(),
        }
        return SourceRecord(json.dumps(doc, separators=(",", ":")).encode())

    async def close(self) -> None:
        pass
