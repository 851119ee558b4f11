"""What producers, consumers and readers share with their client (no import cycle)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from magnetar.client.connection_pool import ConnectionPool
from magnetar.client.lookup import Lookup
from magnetar.common.clock import Clock


@dataclass(slots=True)
class ClientContext:
    pool: ConnectionPool
    lookup: Lookup
    clock: Clock
    request_ids: itertools.count[int]
    operation_timeout_s: float
    rng: random.Random
    producer_ids: itertools.count[int] = field(default_factory=itertools.count)
    consumer_ids: itertools.count[int] = field(default_factory=itertools.count)
    handles: set[Any] = field(default_factory=set)
    """Open producers, consumers and readers (closed with the client)."""
    closed: bool = False
