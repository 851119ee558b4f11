"""Who is this client? The broker's authentication providers and the rules that pick one.

Binary protocol (Pulsar's ``ServerCnx.handleConnect``): CONNECT names a method
(``auth_method_name``, or the legacy ``auth_method`` enum) and carries ``auth_data``.

* A method served by a configured provider: that provider decides; a failure is an
  :class:`~magnetar.common.errors.AuthenticationError` (the broker answers CONNECT with
  Error ``AuthenticationError`` and closes the connection).
* No method, ``none``, or a method no provider serves: the anonymous role when
  ``anonymous_user_role`` is set, else AuthenticationError.

HTTP (Pulsar's ``AuthenticationService.authenticateHttpRequest``): with the
``X-Pulsar-Auth-Method-Name`` header, that provider decides. Without it, each provider
tries the ``Authorization`` header in turn (token: ``Bearer <jwt>``, basic:
``Basic base64(user:password)``); the first that accepts gives the role; when none does,
the anonymous role if set, else AuthenticationError.

Providers are pure: they take the credentials and the time (``now_s``, from the injected
clock) and return an :class:`AuthenticatedRole` or raise. Keys and htpasswd files are read
once, when the :class:`AuthenticationService` is built.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.auth.config import AUTH_DATA_BYTES_MAX, AuthConfig, AuthConfigError, ProviderName
from magnetar.common.errors import AuthenticationError
from magnetar.common.frozen_struct import frozen_struct

if TYPE_CHECKING:  # PyJWT and cryptography load only when a token provider is configured
    from magnetar.auth.tokens import TokenVerifier

log = logging.getLogger(__name__)

ANONYMOUS_METHOD = "anonymous"
AUTH_METHOD_HEADER = "X-Pulsar-Auth-Method-Name"

PeerCertificate = Mapping[str, Any]
"""``ssl.SSLSocket.getpeercert()``'s dict of a verified client certificate."""


@frozen_struct(kw_only=False)
class AuthenticatedRole:
    """The outcome of authentication. ``role`` is None when authentication is off.
    ``expires_at_s``: when the credentials stop being valid (a token's ``exp``)."""

    role: str | None
    method: str
    expires_at_s: float | None = None


UNAUTHENTICATED = AuthenticatedRole(None, "none")
"""The identity of every client while authentication is off."""


class AuthenticationProvider(Protocol):
    name: ProviderName
    scheme: str | None
    """The ``Authorization`` header's scheme (with its space) this provider reads."""

    def authenticate(
        self, data: bytes, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        """Raises AuthenticationError."""
        ...

    def authenticate_http(
        self, authorization: str | None, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        """Raises AuthenticationError (also when the header is not of this provider).
        ``peer_cert``: the verified client certificate of an HTTPS request, if any."""
        ...


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise AuthenticationError(f"{what} is not UTF-8 text") from None


class TokenProvider:
    """JWT tokens (method ``token``); the role is the ``sub`` claim (``token_auth_claim``)."""

    name = ProviderName.TOKEN
    scheme: str | None = "Bearer "

    def __init__(self, verifier: TokenVerifier) -> None:
        self._verifier = verifier

    def authenticate(
        self, data: bytes, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        from magnetar.auth.tokens import InvalidToken

        token = _text(data, "token").strip()
        if token.startswith("Bearer "):  # some clients send the header form
            token = token[len("Bearer ") :]
        try:
            role, expires_at_s = self._verifier.verify(token, now_s)
        except InvalidToken as exc:
            raise AuthenticationError(str(exc)) from None
        return AuthenticatedRole(role, self.name, expires_at_s)

    def authenticate_http(
        self, authorization: str | None, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthenticationError("no bearer token")
        return self.authenticate(authorization[len("Bearer ") :].encode(), None, now_s)


class BasicProvider:
    """User and password checked against an htpasswd file (method ``basic``, data
    ``user:password``); the role is the user name."""

    name = ProviderName.BASIC
    scheme: str | None = "Basic "

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users

    def authenticate(
        self, data: bytes, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        from magnetar.auth.htpasswd import verify_password

        user, sep, password = _text(data, "basic credentials").partition(":")
        if not sep:
            raise AuthenticationError("basic credentials must be user:password")
        stored = self._users.get(user)
        if stored is None or not verify_password(password.encode(), stored):
            raise AuthenticationError("unknown user or wrong password")
        return AuthenticatedRole(user, self.name)

    def authenticate_http(
        self, authorization: str | None, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        if not authorization or not authorization.startswith("Basic "):
            raise AuthenticationError("no basic credentials")
        try:
            data = base64.b64decode(authorization[len("Basic ") :].strip(), validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationError("basic credentials are not base64") from None
        return self.authenticate(data, None, now_s)


def certificate_common_name(cert: PeerCertificate) -> str | None:
    """The (last) CN of a certificate's subject, as Pulsar's TLS provider takes it."""
    common_name = None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                common_name = value
    return common_name


class TlsProvider:
    """Mutual TLS (method ``tls``): the role is the CN of the verified client certificate."""

    name = ProviderName.TLS
    scheme: str | None = None

    def authenticate(
        self, data: bytes, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        if not peer_cert:
            raise AuthenticationError(
                "no trusted client certificate (tls authentication needs the TLS port "
                "with a certificate signed by the broker's trusted CA)"
            )
        role = certificate_common_name(peer_cert)
        if not role:
            raise AuthenticationError("the client certificate has no common name (CN)")
        return AuthenticatedRole(role, self.name)

    def authenticate_http(
        self, authorization: str | None, peer_cert: PeerCertificate | None, now_s: float
    ) -> AuthenticatedRole:
        if not peer_cert:
            raise AuthenticationError(
                "no trusted client certificate (tls authentication over HTTP needs the HTTPS "
                "port with --tls-trust-certs-file)"
            )
        return self.authenticate(b"", peer_cert, now_s)


def _build_provider(name: ProviderName, config: AuthConfig) -> AuthenticationProvider:
    from magnetar.auth.htpasswd import HtpasswdError, load_htpasswd, parse_htpasswd
    from magnetar.auth.tokens import KeyLoadError, TokenVerifier, read_key_bytes

    if name is ProviderName.TOKEN:
        try:
            verifier = TokenVerifier.from_setting(
                secret_key=config.token_secret_key,
                public_key=config.token_public_key,
                role_claim=config.token_auth_claim,
                audience_claim=config.token_audience_claim,
                audience=config.token_audience,
            )
        except KeyLoadError as exc:
            raise AuthConfigError(f"token provider: {exc}") from None
        return TokenProvider(verifier)
    if name is ProviderName.BASIC:
        conf = config.basic_auth_conf
        assert conf is not None, "validated"
        try:
            if conf.startswith("data:"):
                users = parse_htpasswd(read_key_bytes(conf).decode(), "basic_auth_conf")
            else:
                users = load_htpasswd(Path(conf.removeprefix("file://")))
        except (HtpasswdError, KeyLoadError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"basic provider: {exc}") from None
        return BasicProvider(users)
    return TlsProvider()


class AuthenticationService:
    """The configured providers and the anonymous role; built once per broker.

    Raises :class:`AuthConfigError` when a provider's key or file cannot be loaded."""

    def __init__(self, config: AuthConfig) -> None:
        config.validate()
        self.enabled = config.authentication_enabled
        self.anonymous_role = config.anonymous_user_role
        self._providers: dict[str, AuthenticationProvider] = {}
        if self.enabled:
            for name in config.providers:
                self._providers[name.value] = _build_provider(name, config)

    def _anonymous(self, why: str) -> AuthenticatedRole:
        if self.anonymous_role:
            return AuthenticatedRole(self.anonymous_role, ANONYMOUS_METHOD)
        raise AuthenticationError(why)

    def authenticate(
        self,
        method: str | None,
        data: bytes | None,
        peer_cert: PeerCertificate | None,
        now_s: float,
    ) -> AuthenticatedRole:
        """The role of a binary-protocol client (CONNECT or AUTH_RESPONSE).

        Raises AuthenticationError with one line saying what is wrong."""
        if not self.enabled:
            return UNAUTHENTICATED
        data = data or b""
        if len(data) > AUTH_DATA_BYTES_MAX:
            raise AuthenticationError(
                f"auth data of {len(data)} bytes is larger than {AUTH_DATA_BYTES_MAX} bytes"
            )
        provider = self._providers.get(method or "none")
        if provider is None:
            return self._anonymous(
                "no credentials and no anonymous role"
                if not method or method == "none"
                else f"unknown authentication method {method!r} and no anonymous role"
            )
        return provider.authenticate(data, peer_cert, now_s)

    def authenticate_http(
        self,
        headers: Mapping[str, str],
        now_s: float,
        peer_cert: PeerCertificate | None = None,
    ) -> AuthenticatedRole:
        """The role of an HTTP request from its headers (case-insensitive mapping) and,
        over HTTPS, its verified client certificate (the ``tls`` provider's role: the CN).
        Providers are tried in their configured order.

        Raises AuthenticationError."""
        if not self.enabled:
            return UNAUTHENTICATED
        authorization = headers.get("authorization")
        if authorization is not None and len(authorization) > AUTH_DATA_BYTES_MAX:
            raise AuthenticationError(
                f"Authorization header is larger than {AUTH_DATA_BYTES_MAX} bytes"
            )
        method = headers.get(AUTH_METHOD_HEADER.lower())
        if method:
            provider = self._providers.get(method)
            if provider is None:
                raise AuthenticationError(f"unknown authentication method {method!r}")
            return provider.authenticate_http(authorization, peer_cert, now_s)
        failure: AuthenticationError | None = None
        for provider in self._providers.values():
            try:
                return provider.authenticate_http(authorization, peer_cert, now_s)
            except AuthenticationError as exc:
                if provider.scheme and (authorization or "").startswith(provider.scheme):
                    failure = exc  # the reason worth telling: this provider's own header
        if failure is not None:
            log.debug("HTTP credentials refused (%s); trying the anonymous role", failure)
            return self._anonymous(str(failure))
        if authorization:
            return self._anonymous("no provider reads this Authorization header")
        return self._anonymous("no credentials")
