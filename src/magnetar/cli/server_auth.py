"""The authentication and authorization options of the servers (``magnetar standalone``
and ``magnetar broker``), declared once: :func:`server_auth_options` adds them to a command
and hands the command one checked :class:`ServerAuth` instead of fifteen values.

Settings that cannot work (a key that does not load, an unknown provider, authorization
without authentication, unusable broker-client parameters) end the command before anything
starts, with one line naming the problem and exit status 2.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from magnetar.auth.client_credentials import ClientCredentials
from magnetar.auth.config import AuthConfig


@dataclass(frozen=True, slots=True)
class ServerAuth:
    auth: AuthConfig
    """What the server checks of its clients."""
    broker_client: ClientCredentials
    """What the server's own clients present (``brokerClientAuthenticationPlugin``): the
    Functions Worker and its instances, and calls between brokers."""


_OPTION_NAMES = (
    "authentication_enabled",
    "authentication_providers",
    "anonymous_user_role",
    "token_secret_key",
    "token_public_key",
    "token_auth_claim",
    "basic_auth_conf",
    "authentication_refresh_check_seconds",
    "authorization_enabled",
    "super_user_roles",
    "proxy_roles",
    "broker_client_auth_plugin",
    "broker_client_auth_params",
)


def _roles(value: str) -> frozenset[str]:
    return frozenset(r.strip() for r in value.split(",") if r.strip())


def _server_auth(values: dict[str, Any]) -> ServerAuth:
    """The checked settings; a usage error (exit 2) or one line and exit 2 otherwise."""
    from magnetar.auth import AuthConfigError, AuthenticationService
    from magnetar.auth.config import parse_provider_names
    from magnetar.cli.auth_options import parse_auth

    try:
        broker_client = parse_auth(
            values["broker_client_auth_plugin"], values["broker_client_auth_params"]
        )
    except click.BadParameter as exc:
        raise click.UsageError(
            f"--broker-client-auth-plugin/--broker-client-auth-params: {exc.message}"
        ) from None
    if broker_client.tls_cert_file is not None:
        raise click.UsageError(
            "--broker-client-auth-plugin: tls is not supported (the internal clients connect "
            "over plain pulsar://); use token or basic"
        )
    try:
        auth = AuthConfig(
            authentication_enabled=values["authentication_enabled"],
            providers=parse_provider_names(values["authentication_providers"]),
            anonymous_user_role=values["anonymous_user_role"] or None,
            token_secret_key=values["token_secret_key"],
            token_public_key=values["token_public_key"],
            token_auth_claim=values["token_auth_claim"],
            basic_auth_conf=values["basic_auth_conf"],
            refresh_check_s=values["authentication_refresh_check_seconds"],
            authorization_enabled=values["authorization_enabled"],
            super_user_roles=_roles(values["super_user_roles"]),
            proxy_roles=_roles(values["proxy_roles"]),
        )
        AuthenticationService(auth)  # loads keys and files now: a bad one is one line, exit 2
    except AuthConfigError as exc:
        ctx = click.get_current_context(silent=True)
        name = ctx.command_path if ctx is not None else "magnetar"
        click.echo(f"{name}: {exc}", err=True)
        sys.exit(2)
    return ServerAuth(auth=auth, broker_client=broker_client)


def server_auth_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options (Pulsar's names in docs/security.md) to a click command, which
    receives them as one ``server_auth: ServerAuth`` argument."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _OPTION_NAMES}
        return f(*args, server_auth=_server_auth(values), **kwargs)

    options = [
        click.option(
            "--authentication-enabled/--no-authentication-enabled",
            default=False,
            show_default=True,
            help="Check every client's credentials (Pulsar's authenticationEnabled; "
            "docs/security.md).",
        ),
        click.option(
            "--authentication-providers",
            default="",
            metavar="token,basic,tls",
            help="Authentication methods served (or Pulsar's AuthenticationProvider class names).",
        ),
        click.option(
            "--anonymous-user-role",
            default=None,
            help="Role of clients sending no credentials (or an unknown method); unset refuses "
            "them.",
        ),
        click.option(
            "--token-secret-key",
            default=None,
            metavar="KEY",
            help="HS256 key of the token provider: file:///path, data:;base64,... or base64.",
        ),
        click.option(
            "--token-public-key",
            default=None,
            metavar="KEY",
            help="RS256/ES256 public key of the token provider (PEM or DER), same forms.",
        ),
        click.option(
            "--token-auth-claim", default="sub", show_default=True, help="Claim holding the role."
        ),
        click.option(
            "--basic-auth-conf",
            default=None,
            envvar="MAGNETAR_BASIC_AUTH_CONF",
            metavar="FILE",
            help="htpasswd file of the basic provider (apr1 or bcrypt hashes).",
        ),
        click.option(
            "--authentication-refresh-check-seconds",
            default=60.0,
            show_default=True,
            type=click.FloatRange(min=0.1),
            help="How often connections with expiring tokens are checked; expired ones are "
            "asked to refresh (AUTH_CHALLENGE) and closed if they do not.",
        ),
        click.option(
            "--authorization-enabled/--no-authorization-enabled",
            default=False,
            show_default=True,
            help="Deny what was not granted (Pulsar's authorizationEnabled).",
        ),
        click.option(
            "--super-user-roles", default="", metavar="ROLE,...", help="Roles allowed everything."
        ),
        click.option(
            "--proxy-roles",
            default="",
            metavar="ROLE,...",
            help="Roles of proxies (proxyRoles): they act for the originalPrincipal of "
            "CONNECT, and both must be authorized.",
        ),
        click.option(
            "--broker-client-auth-plugin",
            default=None,
            help="What the server's internal clients (a Functions Worker and its instances, "
            "calls between brokers) present: token or basic "
            "(brokerClientAuthenticationPlugin; same spelling as --auth-plugin). With "
            "authorization on, its role must be a super user.",
        ),
        click.option(
            "--broker-client-auth-params",
            default=None,
            help="Parameters of --broker-client-auth-plugin "
            "(brokerClientAuthenticationParameters): token:<jwt>, file:///token, "
            '{"userId":"u","password":"p"}.',
        ),
    ]
    decorated: Callable[..., Any] = command
    for option in reversed(options):
        decorated = option(decorated)
    return decorated
