"""Service URLs naming several hosts, and the order in which a client tries them.

A service URL may list hosts, as in Pulsar: ``pulsar://h1:6650,h2:6650``,
``pulsar+ssl://h1:6651,h2:6651`` or ``http://h1:8080,h2:8080`` (HTTP lookups). Every host
serves the same cluster, so any one of them answers a lookup. :class:`ServiceUrl` splits such
a URL into one URL per host; :class:`ServiceNameResolver` (Pulsar's
``PulsarServiceNameResolver``) hands them out round-robin from a random start, so the
clients of one cluster spread their lookups over its brokers, and a caller whose host
refuses a connection moves on to the next one in turn. Sans-IO: no sockets here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from urllib.parse import urlsplit

from magnetar.client.errors import InvalidConfiguration

BINARY_SCHEMES = ("pulsar", "pulsar+ssl")
HTTP_SCHEMES = ("http", "https")


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """A parsed service URL: its scheme and one URL per listed host (in the order given).

    Each host URL is ``scheme://host[:port]`` followed by the service URL's path without its
    trailing ``/`` (HTTP only; a binary URL has no path)."""

    scheme: str
    urls: tuple[str, ...]

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        """Raises :class:`InvalidConfiguration` for an unknown scheme or an empty host."""
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in BINARY_SCHEMES + HTTP_SCHEMES:
            raise InvalidConfiguration(
                f"unsupported service URL {url!r} "
                "(need pulsar://, pulsar+ssl://, http:// or https://)"
            )
        hosts = [h.strip() for h in parts.netloc.split(",")]
        if not hosts or any(not h for h in hosts):
            raise InvalidConfiguration(f"service URL {url!r} names an empty host")
        path = parts.path.rstrip("/") if scheme in HTTP_SCHEMES else ""
        return cls(scheme, tuple(f"{scheme}://{host}{path}" for host in hosts))

    @property
    def http(self) -> bool:
        return self.scheme in HTTP_SCHEMES

    @property
    def tls(self) -> bool:
        return self.scheme in ("pulsar+ssl", "https")


class ServiceNameResolver:
    """Round-robin over a service URL's hosts, starting at a random one.

    :meth:`rotation` gives every host once, starting with the next host in turn; a caller
    tries them in that order until one answers. Successive calls start one host further, as
    Pulsar's resolver does, so lookups spread over the cluster."""

    __slots__ = ("_next", "urls")

    def __init__(self, service_url: ServiceUrl, rng: random.Random | None = None) -> None:
        self.urls = service_url.urls
        self._next = (rng or random.Random()).randrange(len(self.urls))

    def rotation(self) -> list[str]:
        """Every host URL once, the next host in turn first."""
        start = self._next
        n = len(self.urls)
        self._next = (start + 1) % n
        return [self.urls[(start + i) % n] for i in range(n)]
