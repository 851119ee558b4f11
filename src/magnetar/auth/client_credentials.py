"""Credentials a client presents: on the binary protocol (a ``magnetar.client``
authentication object) and on REST (the ``Authorization`` header).

Used by the command line (``--auth-plugin``/``--auth-params``) and by the broker's own
internal clients (Pulsar's ``brokerClientAuthenticationPlugin``/``Parameters``: the
standalone's Functions Worker and its instances connect with them).
"""

from __future__ import annotations

import base64
from typing import Any

from magnetar.common.frozen_struct import frozen_struct


@frozen_struct(kw_only=False)
class ClientCredentials:
    """A token, a basic user/password pair, a TLS client certificate, or nothing."""

    token: str | None = None
    username: str | None = None
    password: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    def client_authentication(self) -> Any:
        """The ``magnetar.client`` authentication object (None: no credentials)."""
        from magnetar.client import AuthenticationBasic, AuthenticationToken

        if self.token is not None:
            return AuthenticationToken(self.token)
        if self.username is not None and self.password is not None:
            return AuthenticationBasic(self.username, self.password)
        return None

    def http_authorization(self) -> str | None:
        """The REST ``Authorization`` header value (None: none to send)."""
        if self.token is not None:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            pair = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    def http_headers(self) -> dict[str, str]:
        """``{"Authorization": ...}`` or nothing: to merge into a request's headers."""
        value = self.http_authorization()
        return {} if value is None else {"Authorization": value}

    def to_json(self) -> dict[str, str]:
        """For handing the credentials to a subprocess (a function instance)."""
        return {
            k: v
            for k, v in (
                ("token", self.token),
                ("username", self.username),
                ("password", self.password),
                ("tlsCertFile", self.tls_cert_file),
                ("tlsKeyFile", self.tls_key_file),
            )
            if v is not None
        }

    @classmethod
    def from_json(cls, data: Any) -> ClientCredentials:
        """The inverse of :meth:`to_json`; anything but a mapping means no credentials."""
        if not isinstance(data, dict):
            return NO_CREDENTIALS

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(
            token=text("token"),
            username=text("username"),
            password=text("password"),
            tls_cert_file=text("tlsCertFile"),
            tls_key_file=text("tlsKeyFile"),
        )


NO_CREDENTIALS = ClientCredentials()
