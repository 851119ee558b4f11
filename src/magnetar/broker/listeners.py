"""Advertised listeners: the named addresses a broker tells clients to connect to.

A broker reachable under several addresses (inside a cluster network, through a NAT or a
load balancer from outside) names each route, as Pulsar's ``advertisedListeners`` does::

    internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,
    external:pulsar://broker-1.example.com:16650

A client sends the name it wants in LOOKUP's ``advertised_listener_name`` (the official
clients' ``listener_name`` option) or, over HTTP, as ``?listenerName=`` or the
``X-Pulsar-ListenerName`` header, and gets that listener's URLs back. Lookups without a
name get the *internal* listener (``internal_listener_name``, by default the first one
listed). The broker binds nothing for a listener: the addresses must lead to its own ports.

Rules (those of Pulsar's ``MultipleListenerValidator``):

* each entry is ``name:url``; a name may appear at most twice, with one ``pulsar://`` URL
  and at most one ``pulsar+ssl://`` URL (``http://`` and ``https://`` entries are accepted,
  as Pulsar accepts them, and do not take part in lookups);
* one ``host:port`` belongs to one listener only;
* the internal listener name must be one of the names.

Magnetar also requires a ``pulsar://`` URL in every listener (older Pulsar releases did; a
lookup answer needs it) and a non-empty host and a port in every URL.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from magnetar.common.errors import ListenerNotFound
from magnetar.common.frozen_struct import frozen_struct


class ListenerConfigError(ValueError):
    """``advertised_listeners`` / ``internal_listener_name`` break a rule (module doc); the
    message names the entry and the rule."""


@frozen_struct(kw_only=False)
class AdvertisedListener:
    """One named route to the broker, as lookups answer it."""

    name: str
    broker_service_url: str
    """``pulsar://host:port``."""
    broker_service_url_tls: str | None = None
    """``pulsar+ssl://host:port``, or None when the listener has no TLS address."""


_PULSAR_SCHEMES = ("pulsar", "pulsar+ssl")
_IGNORED_SCHEMES = ("http", "https")


@frozen_struct(kw_only=False)
class AdvertisedListeners:
    """The broker's listeners, in the order configured; empty when none are.

    Build it with :func:`parse_advertised_listeners`.
    """

    listeners: tuple[AdvertisedListener, ...] = ()
    internal_name: str | None = None
    """The listener lookups without a name answer with (None when there are no listeners)."""

    def __bool__(self) -> bool:
        return bool(self.listeners)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(listener.name for listener in self.listeners)

    @property
    def internal(self) -> AdvertisedListener | None:
        """The internal listener, or None when no listeners are configured."""
        if self.internal_name is None:
            return None
        return self.require(self.internal_name)

    def require(self, name: str) -> AdvertisedListener:
        """The listener called ``name``.

        Raises :class:`~magnetar.common.errors.ListenerNotFound` when the broker has none
        by that name (a broker without listeners has none at all, as in Pulsar).
        """
        for listener in self.listeners:
            if listener.name == name:
                return listener
        raise ListenerNotFound.for_listener(name)


NO_LISTENERS = AdvertisedListeners()


def parse_advertised_listeners(
    text: str | None, internal_listener_name: str | None = None
) -> AdvertisedListeners:
    """Parse Pulsar's ``advertisedListeners`` format (module doc).

    ``text`` None or blank means no listeners (then ``internal_listener_name`` must be
    unset too). Raises :class:`ListenerConfigError` on any broken rule.
    """
    if text is None or not text.strip():
        if internal_listener_name:
            raise ListenerConfigError(
                f"internal listener {internal_listener_name!r} is set but no advertised "
                "listeners are"
            )
        return NO_LISTENERS
    urls: dict[str, list[str]] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name = name.strip()
        # "pulsar://h:1" alone would read as listener "pulsar" with URL "//h:1".
        if not sep or not name or url.lstrip().startswith("//"):
            raise ListenerConfigError(
                f"advertised listener entry {entry!r} has no listener name (expected "
                "name:pulsar://host:port)"
            )
        urls.setdefault(name, []).append(url.strip())
    if not urls:
        return NO_LISTENERS
    internal = internal_listener_name or next(iter(urls))
    if internal not in urls:
        raise ListenerConfigError(
            f"internal listener {internal!r} is not among the advertised listeners "
            f"({', '.join(urls)})"
        )
    owner_of: dict[str, str] = {}
    listeners: list[AdvertisedListener] = []
    for name, entries in urls.items():
        if len(entries) > 2:
            raise ListenerConfigError(
                f"advertised listener {name!r} has {len(entries)} URLs (at most one "
                "pulsar:// and one pulsar+ssl://)"
            )
        by_scheme: dict[str, str] = {}
        for url in entries:
            scheme, host_port = _split_url(name, url)
            if scheme in by_scheme:
                raise ListenerConfigError(
                    f"advertised listener {name!r} has more than one {scheme}:// URL"
                )
            by_scheme[scheme] = url
            other = owner_of.setdefault(host_port, name)
            if other != name:
                raise ListenerConfigError(
                    f"{host_port} is given to two advertised listeners ({other!r} and {name!r})"
                )
        plain = by_scheme.get("pulsar")
        if plain is None:
            raise ListenerConfigError(f"advertised listener {name!r} has no pulsar:// URL")
        listeners.append(AdvertisedListener(name, plain, by_scheme.get("pulsar+ssl")))
    return AdvertisedListeners(tuple(listeners), internal)


def _split_url(name: str, url: str) -> tuple[str, str]:
    """``(scheme, "host:port")`` of one listener URL; raises ListenerConfigError."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ListenerConfigError(f"advertised listener {name!r}: bad URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _PULSAR_SCHEMES + _IGNORED_SCHEMES:
        raise ListenerConfigError(
            f"advertised listener {name!r}: URL {url!r} is not pulsar:// or pulsar+ssl://"
        )
    if not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ListenerConfigError(
            f"advertised listener {name!r}: URL {url!r} is not scheme://host:port"
        )
    return scheme, f"{parts.hostname}:{port}"
