"""Security settings of a broker: Pulsar's ``authenticationEnabled``,
``authenticationProviders``, ``anonymousUserRole``, ``tokenSecretKey``/``tokenPublicKey``,
the basic provider's htpasswd file, ``authorizationEnabled`` and ``superUserRoles``."""

from __future__ import annotations

import enum

from magnetar.common.frozen_struct import frozen_struct

AUTH_DATA_BYTES_MAX = 64 * 1024
"""Credentials longer than this (CONNECT's auth_data, AUTH_RESPONSE, an ``Authorization``
header) are refused with AuthenticationError before any provider parses them."""


class ProviderName(enum.StrEnum):
    """Authentication methods, named as clients name them in CONNECT's auth_method_name."""

    TOKEN = "token"
    BASIC = "basic"
    TLS = "tls"


_PULSAR_CLASS_NAMES = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": ProviderName.TOKEN,
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": ProviderName.BASIC,
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": ProviderName.TLS,
}


class AuthConfigError(ValueError):
    """A security setting that cannot work (unknown provider, provider without its key)."""


def parse_provider_names(value: str) -> tuple[ProviderName, ...]:
    """``token,basic,tls`` or Pulsar's provider class names, comma separated.

    Raises :class:`AuthConfigError` for an unknown name."""
    names: list[ProviderName] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        name = _PULSAR_CLASS_NAMES.get(item)
        if name is None:
            try:
                name = ProviderName(item.lower())
            except ValueError:
                known = ", ".join(p.value for p in ProviderName)
                raise AuthConfigError(
                    f"unknown authentication provider {item!r} (known: {known}, or "
                    "Pulsar's AuthenticationProvider class names)"
                ) from None
        if name not in names:
            names.append(name)
    return tuple(names)


@frozen_struct(kw_only=False)
class AuthConfig:
    """Authentication and authorization settings. Both are off by default (every client
    is accepted and allowed everything, as Pulsar's defaults)."""

    authentication_enabled: bool = False
    providers: tuple[ProviderName, ...] = ()
    anonymous_user_role: str | None = None
    """Role of clients that send no credentials (or name a method no provider serves);
    None refuses them."""
    token_secret_key: str | None = None
    """HS256 key: ``file:///path``, ``data:;base64,...`` or the key in base64."""
    token_public_key: str | None = None
    """RS256/ES256 public key (PEM or DER), same forms as ``token_secret_key``."""
    token_auth_claim: str = "sub"
    """The claim holding the role (Pulsar's ``tokenAuthClaim``)."""
    token_audience_claim: str | None = None
    token_audience: str | None = None
    """When set, tokens must name this audience in ``token_audience_claim`` (``aud``)."""
    basic_auth_conf: str | None = None
    """htpasswd file (``user:hash`` lines; apr1, bcrypt), or ``data:;base64,...``."""
    refresh_check_s: float = 60.0
    """How often connections with expiring credentials are checked (Pulsar's
    ``authenticationRefreshCheckSeconds``); see :mod:`magnetar.auth.refresh`."""
    authorization_enabled: bool = False
    super_user_roles: frozenset[str] = frozenset()
    proxy_roles: frozenset[str] = frozenset()
    """Pulsar's ``proxyRoles``: a connection authenticated as one of these acts for the
    ``original_principal`` its CONNECT names, and both must be authorized
    (:func:`magnetar.auth.authorization.original_principal_refusal`)."""

    def validate(self) -> None:
        """Raises :class:`AuthConfigError` when a setting cannot work."""
        if self.authentication_enabled and not self.providers and not self.anonymous_user_role:
            raise AuthConfigError(
                "authentication is enabled but no provider and no anonymous role is set"
            )
        if ProviderName.TOKEN in self.providers and not (
            self.token_secret_key or self.token_public_key
        ):
            raise AuthConfigError(
                "the token provider needs --token-secret-key or --token-public-key (tokenSecretKey, tokenPublicKey)"
            )
        if ProviderName.BASIC in self.providers and not self.basic_auth_conf:
            raise AuthConfigError(
                "the basic provider needs an htpasswd file: --basic-auth-conf FILE"
            )
        if self.refresh_check_s <= 0:
            raise AuthConfigError("--authentication-refresh-check-seconds must be positive")
        if self.authorization_enabled and not self.authentication_enabled:
            raise AuthConfigError("--authorization-enabled needs --authentication-enabled")
