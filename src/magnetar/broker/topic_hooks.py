"""Parts that follow a topic's life on its owner (geo-replication's replicators): told when
it has loaded, when its policies changed, and before it closes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.broker.topic import Topic


class TopicHooks(Protocol):
    async def topic_loaded(self, topic: Topic) -> None:
        """``topic`` has loaded and takes no client yet. Must not raise."""

    def policies_applied(self, topic: Topic) -> None:
        """``topic``'s policies changed (:meth:`Topic.apply_policies`). Must not block."""

    async def topic_closing(self, topic: Topic) -> None:
        """``topic`` is closing; its managed ledger is still open. Must not raise."""
