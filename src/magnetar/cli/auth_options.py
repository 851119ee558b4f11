"""``--auth-plugin``/``--auth-params`` (Pulsar's spelling, and client.conf's ``authPlugin``/
``authParams``) for ``magnetar admin``, ``client`` and ``perf``.

Plugins (Pulsar's class names or short names) and their parameters:

* ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` / ``token``:
  ``token:<jwt>``, ``file:///path/to/token`` or the token itself;
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic`` / ``basic``:
  ``{"userId": "...", "password": "..."}`` (Pulsar's JSON) or ``userId:...,password:...``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls`` / ``tls``:
  ``tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem`` (binary protocol over
  ``pulsar+ssl://`` only; REST sends no credentials then).

An unknown plugin or unusable parameters are a usage error (exit 2) naming the option.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import click

from magnetar.auth.client_credentials import ClientCredentials

TOKEN_BYTES_MAX = 64 * 1024

_PLUGINS = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "token": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "basic": "basic",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "tls": "tls",
}


CliAuth = ClientCredentials
"""Credentials of one command invocation."""

NO_AUTH = CliAuth()


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
            raise click.BadParameter(
                f"cannot read token file {path}: {exc.strerror}", param_hint="--auth-params"
            ) from None
        if len(data) > TOKEN_BYTES_MAX:
            raise click.BadParameter(f"token file {path} is too large", param_hint="--auth-params")
        return data.decode("utf-8", "replace").strip()
    return params.strip()


def parse_auth(plugin: str | None, params: str | None, token: str | None = None) -> CliAuth:
    """Credentials from ``--auth-plugin``/``--auth-params`` (or a bare ``--auth-token``).

    Raises :class:`click.BadParameter` for an unknown plugin or unusable parameters."""
    if not plugin:
        if params:
            raise click.BadParameter("needs --auth-plugin", param_hint="--auth-params")
        return CliAuth(token=token) if token else NO_AUTH
    kind = _PLUGINS.get(plugin.strip())
    if kind is None:
        raise click.BadParameter(
            f"unknown plugin {plugin!r} (token, basic, tls or Pulsar's class names)",
            param_hint="--auth-plugin",
        )
    params = params or ""
    if kind == "token":
        value = _read_token(params) if params else (token or "")
        if not value:
            raise click.BadParameter("the token plugin needs a token", param_hint="--auth-params")
        return CliAuth(token=value)
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
            raise click.BadParameter(
                'basic needs {"userId": "...", "password": "..."}', param_hint="--auth-params"
            )
        return CliAuth(username=body["userId"], password=body["password"])
    pairs = _pairs(params)
    cert, key = pairs.get("tlsCertFile"), pairs.get("tlsKeyFile")
    if not cert or not key:
        raise click.BadParameter(
            "tls needs tlsCertFile:/path,tlsKeyFile:/path", param_hint="--auth-params"
        )
    return CliAuth(tls_cert_file=cert, tls_key_file=key)


def auth_options(command: Any) -> Any:
    """Adds ``--auth-plugin`` and ``--auth-params`` to a click command."""
    command = click.option(
        "--auth-params",
        envvar="MAGNETAR_AUTH_PARAMS",
        default=None,
        help="Parameters of --auth-plugin: token:<jwt>, file:///token, "
        '{"userId":"u","password":"p"}, tlsCertFile:c.pem,tlsKeyFile:k.pem.',
    )(command)
    return click.option(
        "--auth-plugin",
        envvar="MAGNETAR_AUTH_PLUGIN",
        default=None,
        help="token, basic, tls (or Pulsar's AuthenticationToken/Basic/Tls class names).",
    )(command)
