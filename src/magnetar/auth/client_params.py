"""Client credentials from an authentication plugin name and its parameters, as Pulsar's
clients and ``client.conf`` spell them (``authPlugin``/``authParams``), and as a broker or
Functions Worker names what its own internal clients present
(``brokerClientAuthenticationPlugin``/``brokerClientAuthenticationParameters``).

Plugins (Pulsar's class names or short names) and their parameters:

* ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` / ``token``:
  ``token:<jwt>``, ``file:///path/to/token`` or the token itself;
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic`` / ``basic``:
  ``{"userId": "...", "password": "..."}`` (Pulsar's JSON) or ``userId:...,password:...``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls`` / ``tls``:
  ``tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials

TOKEN_BYTES_MAX = 64 * 1024

_PLUGINS = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "token": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "tls": "tls",
}


class ClientAuthParamsError(ValueError):
    """An unknown plugin or unusable parameters; ``which`` is ``"plugin"`` or ``"params"``,
    the setting at fault."""

    def __init__(self, which: str, message: str) -> None:
        super().__init__(message)
        self.which = which
        self.message = message


def _pairs(params: str) -> dict[str, str]:
    """``key:value,key:value`` (Pulsar's plain parameter form)."""
    pairs = {}
    for item in params.split(","):
        key, sep, value = item.partition(":")
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs


def _read_token(params: str) -> str:
    if params.startswith("token:"):
        return params.removeprefix("token:").strip()
    if params.startswith("file:"):
        path = Path(unquote(urlparse(params).path))
        try:
            with path.open("rb") as f:
                data = f.read(TOKEN_BYTES_MAX + 1)
        except OSError as exc:
            raise ClientAuthParamsError(
                "params", f"cannot read token file {path}: {exc.strerror}"
            ) from None
        if len(data) > TOKEN_BYTES_MAX:
            raise ClientAuthParamsError("params", f"token file {path} is too large")
        return data.decode("utf-8", "replace").strip()
    return params.strip()


def credentials_from_plugin(
    plugin: str | None, params: str | None, token: str | None = None
) -> ClientCredentials:
    """Credentials of ``plugin`` with ``params`` (or a bare ``token``; nothing at all gives
    :data:`NO_CREDENTIALS`).

    Raises :class:`ClientAuthParamsError` for an unknown plugin or unusable parameters."""
    if not plugin:
        if params:
            raise ClientAuthParamsError("params", "parameters given without a plugin")
        return ClientCredentials(token=token) if token else NO_CREDENTIALS
    kind = _PLUGINS.get(plugin.strip())
    if kind is None:
        raise ClientAuthParamsError(
            "plugin", f"unknown plugin {plugin!r} (token, basic, tls or Pulsar's class names)"
        )
    params = params or ""
    if kind == "token":
        value = _read_token(params) if params else (token or "")
        if not value:
            raise ClientAuthParamsError("params", "the token plugin needs a token")
        return ClientCredentials(token=value)
    if kind == "basic":
        body: Any
        try:
            body = json.loads(params) if params.strip().startswith("{") else _pairs(params)
        except ValueError:
            body = None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("userId"), str)
            or not isinstance(body.get("password"), str)
        ):
            raise ClientAuthParamsError(
                "params", 'basic needs {"userId": "...", "password": "..."}'
            )
        return ClientCredentials(username=body["userId"], password=body["password"])
    pairs = _pairs(params)
    cert, key = pairs.get("tlsCertFile"), pairs.get("tlsKeyFile")
    if not cert or not key:
        raise ClientAuthParamsError("params", "tls needs tlsCertFile:/path,tlsKeyFile:/path")
    return ClientCredentials(tls_cert_file=cert, tls_key_file=key)
