"""The official client's producer driven through a :class:`~magnetar.testing.history.History`."""

from __future__ import annotations

import time
from collections.abc import Callable

import pulsar

from magnetar.testing import wait_until
from magnetar.testing.history import History

WINDOW = 20


class HistorySender:
    """Sends ``"0"``, ``"1"``, ... as producer ``name`` with ``send_async``, at most
    ``WINDOW`` unanswered, recording each send and its outcome in ``history``."""

    def __init__(self, producer: pulsar.Producer, name: str, history: History) -> None:
        self.producer = producer
        self.name = name
        self.history = history
        self.sent = 0
        self.answered = 0
        self.last_acked = -1
        """The highest index (``int(payload)``) acknowledged so far."""
        self.acked_at: dict[int, float] = {}
        """When (``time.monotonic()``) each acknowledged index was acknowledged."""

    def _callback(self, payload: str) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        send = self.history.invoke_send(self.name, payload)

        def answered(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                self.history.receipt(send, (msg_id.ledger_id(), msg_id.entry_id()))
                self.last_acked = max(self.last_acked, send.index)
                self.acked_at[send.index] = time.monotonic()
            else:
                self.history.failed(send, str(result))
            self.answered += 1

        return answered

    def send_until(self, done: Callable[[], bool]) -> None:
        while not done():
            if self.sent - self.answered >= WINDOW:
                wait_until(
                    lambda: self.sent - self.answered < WINDOW or done(), timeout_s=120,
                    what="room in the send window",
                )  # fmt: skip
                continue
            payload = str(self.sent)
            self.producer.send_async(payload.encode(), self._callback(payload))
            self.sent += 1

    def drain(self) -> None:
        self.producer.flush()
        wait_until(lambda: self.answered == self.sent, timeout_s=90, what="every send answered")
