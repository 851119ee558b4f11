"""Admin service URLs with several hosts, as Pulsar's clients accept them.

``http://h1:8080,h2:8080,h3:8080[/prefix]`` names one service served by any of the hosts;
``https://…`` the same over TLS. A host without a port gets the scheme's default (80, 443).
Parsing is pure; :class:`~magnetar.admin_client.transport.Transport` does the trying.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.admin_client.errors import AdminError


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """A parsed admin service URL: ``scheme``, one or more ``hosts``, a path ``prefix``."""

    scheme: str
    hosts: tuple[HostPort, ...]
    prefix: str = ""

    def base_url(self, index: int) -> str:
        """The plain URL of host ``index`` (``http://h2:8080/prefix``)."""
        return f"{self.scheme}://{self.hosts[index]}{self.prefix}"

    def __str__(self) -> str:
        return f"{self.scheme}://{','.join(str(h) for h in self.hosts)}{self.prefix}"


def parse_service_url(url: str) -> ServiceUrl:
    """Parse ``url``; raises :class:`AdminError` (one line) when it is not
    ``http[s]://host[:port][,host[:port]…][/prefix]``."""
    scheme, sep, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise AdminError(f"invalid admin URL {url!r} (expected http://host:port[,host:port…])")
    authority, slash, path = rest.partition("/")
    prefix = ("/" + path).rstrip("/") if slash else ""
    default_port = 443 if scheme == "https" else 80
    hosts = [_host_port(part, default_port, url) for part in authority.split(",")]
    return ServiceUrl(scheme, tuple(hosts), prefix)


def _host_port(text: str, default_port: int, url: str) -> HostPort:
    text = text.strip()
    if text.startswith("["):  # [ipv6]:port
        host, _, after = text[1:].partition("]")
        port_text = after.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise AdminError(f"invalid admin URL {url!r}: a host is empty")
    if not port_text:
        return HostPort(host, default_port)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AdminError(f"invalid admin URL {url!r}: bad port {port_text!r}")
    return HostPort(host, int(port_text))
