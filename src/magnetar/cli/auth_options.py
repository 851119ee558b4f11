"""``--auth-plugin``/``--auth-params`` (Pulsar's spelling, and client.conf's ``authPlugin``/
``authParams``) for ``magnetar admin``, ``client`` and ``perf``.

Plugins and parameters: :mod:`magnetar.auth.client_params`, where the parsing lives.

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

from typing import Any

import click

from magnetar.auth.client_credentials import ClientCredentials
from magnetar.auth.client_params import ClientAuthParamsError, credentials_from_plugin

CliAuth = ClientCredentials
"""Credentials of one command invocation."""

NO_AUTH = CliAuth()


def parse_auth(plugin: str | None, params: str | None, token: str | None = None) -> CliAuth:
    """Credentials from ``--auth-plugin``/``--auth-params`` (or a bare ``--auth-token``);
    see :mod:`magnetar.auth.client_params`.

    Raises :class:`click.BadParameter` for an unknown plugin or unusable parameters."""
    try:
        return credentials_from_plugin(plugin, params, token)
    except ClientAuthParamsError as exc:
        if exc.which == "params" and not plugin:
            raise click.BadParameter("needs --auth-plugin", param_hint="--auth-params") from None
        hint = "--auth-plugin" if exc.which == "plugin" else "--auth-params"
        raise click.BadParameter(exc.message, param_hint=hint) from None


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
