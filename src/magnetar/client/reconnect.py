"""The reconnect loop shared by producers, consumers and readers, and its one rule.

A handler that has been registered once (its create or subscribe succeeded) never gives up
on a lost connection or a moved topic while it is open, as Pulsar's clients do: it retries
its whole connect sequence (lookup over every host of the service URL and every broker a
lookup names, then PRODUCER or SUBSCRIBE) with exponential backoff until it succeeds or the
handler is closed. The only errors that end it are those that say the topic can no longer
be served to this handler whatever is retried (:func:`ends_reconnecting`).

That is wider than what a *first* create or subscribe retries (``MagnetarError.retriable``,
Pulsar's ``PulsarClientException.isRetriableError``): right after a failover a broker may
still hold the handler's previous registration (``ProducerBusy``, ``ConsumerBusy``), answer
while it cannot vouch for the topic (``ServiceNotReady``, ``MetadataError`` "session … is
lost", ``TooManyRequests``), fail with an unknown error, or a lookup may bounce between
brokers that disagree for a moment; each clears up once ownership settles. Pulsar's Java
``ConsumerImpl`` likewise keeps reconnecting an established consumer on every error but
``TopicDoesNotExistException``, and its ``ProducerImpl`` an established producer on every
error but a terminated topic or a fenced producer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from magnetar.client.backoff import Backoff
from magnetar.client.errors import AlreadyClosed, InvalidConfiguration, TlsHandshakeError
from magnetar.common.clock import Clock
from magnetar.common.errors import (
    InvalidTopicName,
    ListenerNotFound,
    MagnetarError,
    ProducerFenced,
    TopicNotFound,
    TopicTerminated,
)

log = logging.getLogger(__name__)

ENDS_RECONNECTING: tuple[type[MagnetarError], ...] = (
    TopicNotFound,  # deleted (and not to be re-created): Java's consumer stops here too
    TopicTerminated,  # no producer may write again
    ProducerFenced,  # another producer took exclusive access
    # The client's own configuration, which no retry changes:
    ListenerNotFound,
    TlsHandshakeError,
    InvalidConfiguration,
    InvalidTopicName,
    AlreadyClosed,
)
"""The errors on which an established handler stops reconnecting (see the module docstring)."""


def ends_reconnecting(exc: MagnetarError) -> bool:
    """Whether ``exc``, answered to a reconnect of an established producer, consumer or
    reader, ends it (it is failed with ``exc``); every other error is retried after backoff."""
    return isinstance(exc, ENDS_RECONNECTING)


async def reconnect(
    *,
    what: str,
    clock: Clock,
    backoff: Backoff,
    still_connecting: Callable[[], bool],
    connect: Callable[[], Awaitable[None]],
    on_fatal: Callable[[MagnetarError], None],
) -> None:
    """Call ``connect`` after each backoff delay while ``still_connecting()`` holds.

    Returns after the first successful ``connect``, or as soon as ``still_connecting()`` is
    false. An error for which :func:`ends_reconnecting` holds is fatal: ``on_fatal(exc)`` is
    called once and the loop ends; any other :class:`MagnetarError`, or an ``OSError`` from
    the network, is logged and retried. ``what`` names the handler in log lines (e.g.
    ``"producer p1 on persistent://…"``).
    """
    while still_connecting():
        await clock.sleep(backoff.next_ms() / 1000)
        if not still_connecting():
            return
        try:
            await connect()
            return
        except MagnetarError as exc:
            if ends_reconnecting(exc):
                log.warning("%s: fatal error on reconnect: %s", what, exc)
                on_fatal(exc)
                return
            log.info("%s: reconnect failed, retrying: %s: %s", what, type(exc).__name__, exc)
        except OSError as exc:  # a socket error not (yet) wrapped as ConnectError
            log.info("%s: reconnect failed, retrying: %s", what, exc)
