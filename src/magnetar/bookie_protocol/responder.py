"""Where a bookie's answers go: the :class:`Responder` seam.

A bookie hands every answer to the responder of the request: a TCP connection
(``magnetar.bookie.server.BookieConnection``) encodes it, an in-process caller (the ledger
client's ``LocalBookieTransport``) takes the typed response as it is. Both sides import the
seam from here, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.bookie_protocol.codec import Response


Reply = tuple["Response", bytes]
"""A response header and its payload (an entry's body for reads, else empty)."""


class Responder(Protocol):
    """One client connection (or an in-process caller) of a bookie."""

    def reply(self, response: Response, payload: bytes = b"") -> None:
        """Deliver one answer now (or drop it if the responder is closed)."""
        ...

    def reply_all(self, replies: list[Reply]) -> None:
        """Deliver answers in order (one write for a connection)."""
        ...

    def pause_reading(self) -> None:
        """Stop taking requests until :meth:`resume_reading` (journal backpressure)."""
        ...

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        """The bookie is stopping: drop the connection (pending requests fail)."""
        ...


__all__ = ["Reply", "Responder"]
