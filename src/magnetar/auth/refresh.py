"""Refreshing credentials on a live connection (Pulsar's ``authenticationRefreshCheckSeconds``
and AUTH_CHALLENGE/AUTH_RESPONSE), as a sans-IO state machine.

A connection whose credentials expire (a token with ``exp``) is checked every
``refresh_check_s``. The first check after expiry challenges the client (the shell sends
AUTH_CHALLENGE carrying :data:`REFRESH_AUTH_DATA`); a client that answers with valid
credentials **for the same role** goes on, with the new expiry; one that answers with
refused credentials, another role, or does not answer before the next check is closed. A
client that did not announce ``supports_auth_refresh`` in CONNECT cannot be challenged and
is closed at the first check after expiry, as Pulsar does.

Inputs: :meth:`CredentialRefresh.on_check` (the time), :meth:`on_response` (the outcome of
authenticating the AUTH_RESPONSE). Outputs: :class:`Keep`, :class:`Challenge`,
:class:`Close` with the reason.
"""

from __future__ import annotations

from magnetar.auth.authentication import AuthenticatedRole
from magnetar.common.frozen_struct import frozen_struct

REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
"""The challenge data asking a client for fresh credentials (Pulsar's ``REFRESH_AUTH_DATA``)."""


@frozen_struct(kw_only=False)
class Keep:
    """Nothing to do."""


@frozen_struct(kw_only=False)
class Challenge:
    """Send AUTH_CHALLENGE for ``method``."""

    method: str


@frozen_struct(kw_only=False)
class Close:
    reason: str


RefreshAction = Keep | Challenge | Close


class CredentialRefresh:
    """The refresh state of one connection's credentials."""

    def __init__(self, identity: AuthenticatedRole, supports_refresh: bool) -> None:
        self.identity = identity
        self._supports_refresh = supports_refresh
        self._challenged = False

    @property
    def expires(self) -> bool:
        return self.identity.expires_at_s is not None

    @property
    def challenged(self) -> bool:
        """A challenge was sent and not answered yet."""
        return self._challenged

    def on_check(self, now_s: float) -> RefreshAction:
        expires_at_s = self.identity.expires_at_s
        if self._challenged:
            return Close("the client did not answer the authentication challenge in time")
        if expires_at_s is None or now_s < expires_at_s:
            return Keep()
        if not self._supports_refresh:
            return Close("credentials expired and the client cannot refresh them")
        self._challenged = True
        return Challenge(self.identity.method)

    def on_response(self, outcome: AuthenticatedRole | Exception) -> RefreshAction:
        """The AUTH_RESPONSE's credentials, authenticated (or the error doing so). An
        unsolicited response is judged by the same rules, as Pulsar does."""
        self._challenged = False
        if isinstance(outcome, Exception):
            return Close(f"refreshed credentials refused: {outcome}")
        if outcome.role != self.identity.role:
            return Close(
                f"refreshed credentials are for role {outcome.role!r}, not {self.identity.role!r}"
            )
        self.identity = outcome
        return Keep()
