"""The security options of every server process, declared once as data.

``magnetar standalone`` and ``magnetar broker`` (click, through
:func:`magnetar.cli.server_auth.server_auth_options`) and ``magnetar functions-worker``
(argparse, :func:`add_argparse_options`) build their options from
:data:`SERVER_AUTH_OPTIONS`, and turn the values into one :class:`ServerAuth` with
:func:`server_auth_from`. Names follow Pulsar's settings (docs/security.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from magnetar.auth.client_credentials import ClientCredentials
from magnetar.auth.client_params import ClientAuthParamsError, credentials_from_plugin
from magnetar.auth.config import AuthConfig, AuthConfigError, ProviderName, parse_provider_names
from magnetar.common.frozen_struct import frozen_struct

if TYPE_CHECKING:
    import argparse


class OptionKind(enum.Enum):
    SWITCH = "switch"
    """``--name/--no-name``, a bool."""
    TEXT = "text"
    SECONDS = "seconds"
    """A float of at least :data:`SECONDS_MIN`."""


SECONDS_MIN = 0.1


@frozen_struct(kw_only=False)
class OptionSpec:
    name: str
    """Without dashes: ``authentication-enabled`` (its value's key uses underscores)."""
    kind: OptionKind
    default: Any
    help: str
    metavar: str | None = None
    envvar: str | None = None

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")


SERVER_AUTH_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "authentication-enabled", OptionKind.SWITCH, False,
        "Check every client's credentials (Pulsar's authenticationEnabled; docs/security.md).",
    ),
    OptionSpec(
        "authentication-providers", OptionKind.TEXT, "",
        "Authentication methods served (or Pulsar's AuthenticationProvider class names).",
        metavar="token,basic,tls",
    ),
    OptionSpec(
        "anonymous-user-role", OptionKind.TEXT, None,
        "Role of clients sending no credentials (or an unknown method); unset refuses them.",
    ),
    OptionSpec(
        "token-secret-key", OptionKind.TEXT, None,
        "HS256 key of the token provider: file:///path, data:;base64,... or base64.",
        metavar="KEY",
    ),
    OptionSpec(
        "token-public-key", OptionKind.TEXT, None,
        "RS256/ES256 public key of the token provider (PEM or DER), same forms.",
        metavar="KEY",
    ),
    OptionSpec("token-auth-claim", OptionKind.TEXT, "sub", "Claim holding the role."),
    OptionSpec(
        "basic-auth-conf", OptionKind.TEXT, None,
        "htpasswd file of the basic provider (apr1 or bcrypt hashes).",
        metavar="FILE", envvar="MAGNETAR_BASIC_AUTH_CONF",
    ),
    OptionSpec(
        "authentication-refresh-check-seconds", OptionKind.SECONDS, 60.0,
        "How often connections with expiring tokens are checked; expired ones are asked to "
        "refresh (AUTH_CHALLENGE) and closed if they do not.",
    ),
    OptionSpec(
        "authorization-enabled", OptionKind.SWITCH, False,
        "Deny what was not granted (Pulsar's authorizationEnabled).",
    ),
    OptionSpec(
        "super-user-roles", OptionKind.TEXT, "", "Roles allowed everything.", metavar="ROLE,..."
    ),
    OptionSpec(
        "proxy-roles", OptionKind.TEXT, "",
        "Roles of proxies (proxyRoles): they act for the originalPrincipal of CONNECT, and "
        "both must be authorized.",
        metavar="ROLE,...",
    ),
    OptionSpec(
        "broker-client-auth-plugin", OptionKind.TEXT, None,
        "What this process's own clients present to the brokers (a Functions Worker and its "
        "instances, calls between brokers): token or basic (brokerClientAuthenticationPlugin; "
        "same spelling as --auth-plugin). With authorization on, its role must be a super user.",
    ),
    OptionSpec(
        "broker-client-auth-params", OptionKind.TEXT, None,
        "Parameters of --broker-client-auth-plugin (brokerClientAuthenticationParameters): "
        'token:<jwt>, file:///token, {"userId":"u","password":"p"}.',
    ),
)  # fmt: skip


@frozen_struct(kw_only=False)
class ServerAuth:
    auth: AuthConfig
    """What the process checks of its clients."""
    broker_client: ClientCredentials
    """What the process's own clients present (``brokerClientAuthenticationPlugin``)."""


class ServerAuthError(ValueError):
    """Settings that cannot work; the message names the option(s) at fault."""


def _roles(value: str) -> frozenset[str]:
    return frozenset(r.strip() for r in value.split(",") if r.strip())


def server_auth_from(values: Mapping[str, Any]) -> ServerAuth:
    """The settings from option values keyed by :attr:`OptionSpec.key`, with keys and files
    loaded now (a key that does not load fails here, not at the first client).

    Raises :class:`ServerAuthError`."""
    from magnetar.auth.authentication import AuthenticationService

    try:
        broker_client = credentials_from_plugin(
            values["broker_client_auth_plugin"], values["broker_client_auth_params"]
        )
    except ClientAuthParamsError as exc:
        if not values["broker_client_auth_plugin"]:
            raise ServerAuthError(
                "--broker-client-auth-params needs --broker-client-auth-plugin"
            ) from None
        raise ServerAuthError(
            f"--broker-client-auth-plugin/--broker-client-auth-params: {exc.message}"
        ) from None
    if broker_client.tls_cert_file is not None:
        raise ServerAuthError(
            "--broker-client-auth-plugin: tls is not supported (the internal clients connect "
            "over plain pulsar://); use token or basic"
        )
    try:
        auth = AuthConfig(
            authentication_enabled=bool(values["authentication_enabled"]),
            providers=parse_provider_names(values["authentication_providers"] or ""),
            anonymous_user_role=values["anonymous_user_role"] or None,
            token_secret_key=values["token_secret_key"],
            token_public_key=values["token_public_key"],
            token_auth_claim=values["token_auth_claim"],
            basic_auth_conf=values["basic_auth_conf"],
            refresh_check_s=float(values["authentication_refresh_check_seconds"]),
            authorization_enabled=bool(values["authorization_enabled"]),
            super_user_roles=_roles(values["super_user_roles"] or ""),
            proxy_roles=_roles(values["proxy_roles"] or ""),
        )
        AuthenticationService(auth)  # loads keys and files
    except AuthConfigError as exc:
        raise ServerAuthError(str(exc)) from None
    return ServerAuth(auth=auth, broker_client=broker_client)


WORKER_ROLE = "functions-worker"
"""The role a process's own Functions Worker gets when authorization is off and no super
user role is set (any authenticated role is then allowed everything)."""


def own_client_credentials(auth: AuthConfig, given: ClientCredentials) -> ClientCredentials:
    """What the process's own clients (an in-process Functions Worker and its instances)
    present to its broker: ``given`` (``--broker-client-auth-*``) when it has any; none
    when the broker lets such clients in without (authentication off, or an anonymous role
    that authorization allows everything); else a token minted with the token secret key
    for the first super user role (for :data:`WORKER_ROLE` when authorization is off and
    there is none). The token has no expiry and lives only in the process.

    Raises :class:`ServerAuthError` naming the options when none of these can work (a
    public key only, basic or TLS authentication only, or authorization without a super
    user role): the process must not start a worker that cannot connect."""
    if not auth.authentication_enabled or given.http_authorization() is not None:
        return given
    anonymous = auth.anonymous_user_role
    if anonymous and (not auth.authorization_enabled or anonymous in auth.super_user_roles):
        return given
    options = (
        "the Functions Worker needs credentials: give --broker-client-auth-plugin and "
        "--broker-client-auth-params"
        + (" (a super user's)" if auth.authorization_enabled else "")
        + ", or --no-functions-worker"
    )
    if (
        ProviderName.TOKEN not in auth.providers
        or auth.token_secret_key is None
        or auth.token_auth_claim != "sub"
        or auth.token_audience is not None
    ):
        raise ServerAuthError(f"{options} (or the token provider with --token-secret-key)")
    if auth.authorization_enabled and not auth.super_user_roles:
        raise ServerAuthError(f"{options} (or --super-user-roles, a role to mint a token for)")
    from magnetar.auth.tokens import create_token, read_key_bytes

    role = min(auth.super_user_roles) if auth.super_user_roles else WORKER_ROLE
    return ClientCredentials(
        token=create_token(role, secret_key=read_key_bytes(auth.token_secret_key))
    )


def _seconds(text: str) -> float:
    import argparse  # the functions worker's parser (not the servers' click commands)

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < SECONDS_MIN:
        raise argparse.ArgumentTypeError(f"{value:g} is below {SECONDS_MIN:g}")
    return value


def add_argparse_options(parser: argparse.ArgumentParser) -> None:
    """The options of :data:`SERVER_AUTH_OPTIONS` on an argparse parser (values under
    :attr:`OptionSpec.key`)."""
    import argparse
    import os

    group = parser.add_argument_group("security (docs/security.md)")
    for spec in SERVER_AUTH_OPTIONS:
        default = spec.default
        if spec.envvar is not None:
            default = os.environ.get(spec.envvar, default)
        if spec.kind is OptionKind.SWITCH:
            group.add_argument(
                f"--{spec.name}",
                dest=spec.key,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=spec.help,
            )
        else:
            group.add_argument(
                f"--{spec.name}",
                dest=spec.key,
                default=default,
                type=_seconds if spec.kind is OptionKind.SECONDS else str,
                metavar=spec.metavar,
                help=spec.help,
            )
