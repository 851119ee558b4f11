"""The client configuration file: where ``admin``, ``client`` and ``perf`` find their URLs.

Pulsar's tools read ``conf/client.conf``, a Java properties file; Magnetar reads the same
keys from the same format, so one file serves both::

    webServiceUrl=http://broker.example:8080/
    brokerServiceUrl=pulsar://broker.example:6650/
    authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
    authParams=token:eyJhbGciOi...

The file is ``--config FILE`` (on ``magnetar`` itself), else ``$MAGNETAR_CLIENT_CONF``, else
``$XDG_CONFIG_HOME/magnetar/client.conf`` (``~/.config/magnetar/client.conf``) when it exists.
Command-line options win over environment variables (``MAGNETAR_ADMIN_URL``, ...), which
win over the file, which wins over the built-in defaults. Other keys of a Pulsar
``client.conf`` are ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CONFIG_ENV = "MAGNETAR_CLIENT_CONF"
CONFIG_SIZE_MAX_BYTES = 1024 * 1024


class ClientConfigError(ValueError):
    """The file cannot be read or a line is not ``key=value``; the message names the file
    and, where it applies, the line."""


def default_config_path(env: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/magnetar/client.conf``, XDG's default being ``~/.config``."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "magnetar" / "client.conf"


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Keys and values of a Java properties file (``key=value`` or ``key: value`` lines,
    ``#`` and ``!`` comments, blank lines). Raises :class:`ClientConfigError` for a line
    with no separator. Line continuations and escapes are not supported (client.conf
    files have none)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ClientConfigError(f"{source}, line {number}: expected key=value, got {line!r}")
        values[line[:cut].strip()] = line[cut + 1 :].strip()
    return values


def default_map(values: dict[str, str]) -> dict[str, Any]:
    """Click's ``default_map`` for the ``magnetar`` group from a client.conf's values: the
    admin URL from ``webServiceUrl``, the service URL from ``brokerServiceUrl`` and a token
    from ``authPlugin``/``authParams`` (token, basic or tls; see
    :mod:`magnetar.cli.auth_options`), for the commands that take them."""
    admin: dict[str, Any] = {}
    client: dict[str, Any] = {}
    perf_command: dict[str, Any] = {}
    if url := values.get("webServiceUrl"):
        admin["admin_url"] = url.rstrip("/")
    if url := values.get("brokerServiceUrl"):
        client["url"] = url.rstrip("/")
        perf_command["service_url"] = url.rstrip("/")
    if plugin := values.get("authPlugin"):
        for command in (admin, client, perf_command):
            command["auth_plugin"] = plugin
            command["auth_params"] = values.get("authParams", "")
    perf = {name: dict(perf_command) for name in ("produce", "consume", "read")}
    return {"admin": admin, "client": client, "perf": perf}


def load(path: Path) -> dict[str, str]:
    """The values of the file at ``path``. Raises :class:`ClientConfigError` if it cannot
    be read, is larger than :data:`CONFIG_SIZE_MAX_BYTES` or has a malformed line."""
    try:
        with path.open("rb") as f:
            data = f.read(CONFIG_SIZE_MAX_BYTES + 1)
    except OSError as e:
        raise ClientConfigError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > CONFIG_SIZE_MAX_BYTES:
        raise ClientConfigError(f"{path} is larger than {CONFIG_SIZE_MAX_BYTES} bytes")
    return parse_properties(data.decode("utf-8", "replace"), str(path))
