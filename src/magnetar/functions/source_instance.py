"""One source instance: read records from a :class:`~magnetar.functions.connectors.connector.Source`
and publish them to the definition's output topic.

Records are sent without waiting for each receipt (batched), at most
:data:`PENDING_RECORDS_MAX` unconfirmed at once. A record with ``on_stored`` is a checkpoint:
the instance waits for its receipt and every earlier one, then calls it (the file source
marks a file done there). A send that fails ends :meth:`SourceInstance.run` with the error;
the runtime restarts the instance, and the source starts again from its last checkpoint
(at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Callable

from magnetar.client import Client, MessageId
from magnetar.common.clock import Clock
from magnetar.common.errors import MagnetarError
from magnetar.functions.connectors.connector import Source
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_stats import InstanceStats

PENDING_RECORDS_MAX = 1_000

_log = logging.getLogger(__name__)


class SourceInstance:
    """Runs ``make_source()`` for ``spec`` until cancelled. ``on_running`` is called once the
    output producer exists."""

    def __init__(
        self,
        spec: InstanceSpec,
        make_source: Callable[[], Source],
        *,
        clock: Clock,
        stats: InstanceStats,
        on_running: Callable[[], None] | None = None,
    ) -> None:
        self._spec = spec
        self._make_source = make_source
        self._clock = clock
        self._stats = stats
        self._on_running = on_running

    async def run(self) -> None:
        """Raises what stops the instance (connect errors, a failed send)."""
        config = self._spec.config
        assert config.output is not None  # FunctionConfig refuses a source without one
        client = Client(
            self._spec.service_url,
            authentication=self._spec.client_credentials.client_authentication(),
        )
        source: Source | None = None
        try:
            producer = await client.create_producer(
                config.output,
                batching_enabled=True,
                batching_max_publish_delay_ms=1,
                properties={"application": "pulsar-source", "id": config.fqfn,
                            "instance_id": str(self._spec.instance_id)},
            )  # fmt: skip
            source = self._make_source()
            if self._on_running is not None:
                self._on_running()
            pending: deque[asyncio.Future[MessageId]] = deque()
            while True:
                record = await source.read()
                self._stats.record_received()
                self._stats.record_invocation()
                future = producer.send_async(
                    record.value,
                    properties=dict(record.properties) or None,
                    partition_key=record.key,
                )
                sent_s = self._clock.monotonic_s()
                future.add_done_callback(functools.partial(self._count, sent_s=sent_s))
                pending.append(future)
                if record.on_stored is not None or len(pending) >= PENDING_RECORDS_MAX:
                    while pending:
                        await pending.popleft()  # raises the send's error
                    if record.on_stored is not None:
                        record.on_stored()
                else:
                    while pending and pending[0].done():
                        pending.popleft().result()  # raises the send's error
        finally:
            if source is not None:
                with contextlib.suppress(Exception):
                    await source.close()
            with contextlib.suppress(MagnetarError):
                await client.close()

    def _count(self, future: asyncio.Future[MessageId], *, sent_s: float) -> None:
        """Counts a receipt (or a failed send) as it arrives."""
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            self._stats.record_processed((self._clock.monotonic_s() - sent_s) * 1000)
        else:
            self._stats.record_system_exception(exc)
