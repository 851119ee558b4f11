"""Who is on one broker connection, and may they do this: the asyncio shell around
:mod:`magnetar.auth` for :class:`~magnetar.broker.connection.ServerConnection`.

* CONNECT: the credentials go to the broker's
  :class:`~magnetar.auth.AuthenticationService`; refused ones are answered with Error
  ``AuthenticationError`` (request id 2^64-1, Pulsar's -1) and the connection is closed.
* Expiring credentials (a token's ``exp``) are checked every ``auth.refresh_check_s`` and
  refreshed with AUTH_CHALLENGE/AUTH_RESPONSE (:mod:`magnetar.auth.refresh`).
* Requests are authorized against the role (``service.access``); behind a proxy role
  (``auth.proxy_roles``), against CONNECT's ``original_principal`` too. A proxy role
  without an original principal, or another role naming one, is refused at CONNECT with
  Error ``AuthorizationError`` ("Invalid roles: ...") and closed, as Pulsar does.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from magnetar.auth import UNAUTHENTICATED, TopicOperation
from magnetar.auth.authorization import original_principal_refusal
from magnetar.auth.refresh import REFRESH_AUTH_DATA, Challenge, Close, CredentialRefresh
from magnetar.common.clock import Timer
from magnetar.common.errors import AuthenticationError, ProtocolError, ServerError
from magnetar.common.names import NamespaceName, TopicName
from magnetar.protocol import AuthChallenge, AuthData, AuthResponse, Command, Connect, Error

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerConnection

log = logging.getLogger(__name__)

AUTH_FAILED_REQUEST_ID = 2**64 - 1
"""Pulsar answers a refused CONNECT with request id -1; the uint64 field carries 2^64-1."""


class ConnectionAuth:
    """The identity of one connection and the refresh of its credentials."""

    def __init__(self, conn: ServerConnection, server_version: str) -> None:
        # Weak: the connection holds this object, and a strong reference back made each
        # closed connection a cycle that only the cyclic collector frees; with the serving
        # thresholds (gc_tuning) that was hours away on a quiet broker: ~5 KB held per
        # connection ever made. Everything here is called through the live connection.
        self._conn_ref = weakref.ref(conn)
        self._server_version = server_version
        self.identity = UNAUTHENTICATED
        """Who the client authenticated as (role None while authentication is off)."""
        self.original_principal: str | None = None
        """A proxy role's client (CONNECT's ``original_principal``): it is authorized
        too, besides the proxy role (:attr:`roles`)."""
        self._refresh: CredentialRefresh | None = None
        self._timer: Timer | None = None

    @property
    def _conn(self) -> ServerConnection:
        conn = self._conn_ref()
        assert conn is not None, "ConnectionAuth used after its connection was freed"
        return conn

    def _now_s(self) -> float:
        return self._conn.service.clock.now_ms() / 1000

    def _peer_certificate(self) -> Any:
        transport = self._conn.transport
        if transport is None or transport.get_extra_info("sslcontext") is None:
            return None
        return transport.get_extra_info("peercert")

    def _refuse(self, reason: str) -> None:
        conn = self._conn
        log.info("connection %s: authentication refused: %s", conn.address, reason)
        conn.send_command(
            Error(
                request_id=AUTH_FAILED_REQUEST_ID,
                error=ServerError.AuthenticationError,
                message=f"Unable to authenticate: {reason}",
            )
        )
        conn.close()

    def on_connect(self, cmd: Connect) -> bool:
        """Authenticate CONNECT; False when refused (answered and closed already)."""
        method = cmd.auth_method_name
        if method is None and cmd.auth_method is not None:  # the legacy enum
            method = cmd.auth_method.name.removeprefix("AuthMethod").lower()
        service = self._conn.service
        try:
            self.identity = service.authentication.authenticate(
                method, cmd.auth_data, self._peer_certificate(), self._now_s()
            )
        except AuthenticationError as exc:
            self._refuse(str(exc))
            return False
        if service.access.enabled:
            refused = original_principal_refusal(
                self.identity.role, cmd.original_principal, service.config.auth.proxy_roles
            )
            if refused is not None:
                conn = self._conn
                log.info(
                    "connection %s: role %r with originalPrincipal %r refused: %s",
                    conn.address,
                    self.identity.role,
                    cmd.original_principal,
                    refused,
                )
                conn.send_command(
                    Error(
                        request_id=AUTH_FAILED_REQUEST_ID,
                        error=ServerError.AuthorizationError,
                        message=f"Invalid roles: {refused}",
                    )
                )
                conn.close()
                return False
            if cmd.original_principal:
                self.original_principal = cmd.original_principal.strip()
        if self.identity.expires_at_s is not None:
            flags = cmd.feature_flags
            self._refresh = CredentialRefresh(
                self.identity, bool(flags is not None and flags.supports_auth_refresh)
            )
            self._schedule_check()
        return True

    def _schedule_check(self) -> None:
        service = self._conn.service
        self._timer = service.clock.call_later(service.config.auth.refresh_check_s, self._check)

    def _check(self) -> None:
        conn = self._conn
        if conn.closed or self._refresh is None:
            return
        action = self._refresh.on_check(self._now_s())
        if isinstance(action, Close):
            log.info("connection %s: closing: %s", conn.address, action.reason)
            conn.close()
            return
        if isinstance(action, Challenge):
            conn.send_command(
                AuthChallenge(
                    server_version=self._server_version,
                    challenge=AuthData(auth_method_name=action.method, auth_data=REFRESH_AUTH_DATA),
                    protocol_version=conn.protocol_version,
                )
            )
        self._schedule_check()

    def on_auth_response(self, cmd: AuthResponse) -> None:
        """Fresh credentials: the same role goes on, anything else is refused and closed."""
        if self._refresh is None:
            raise ProtocolError("AUTH_RESPONSE on a connection whose credentials do not expire")
        response = cmd.response
        outcome: Any
        try:
            outcome = self._conn.service.authentication.authenticate(
                response.auth_method_name if response else None,
                response.auth_data if response else None,
                self._peer_certificate(),
                self._now_s(),
            )
        except AuthenticationError as exc:
            outcome = exc
        action = self._refresh.on_response(outcome)
        if isinstance(action, Close):
            self._refuse(action.reason)
            return
        self.identity = self._refresh.identity

    def close(self) -> None:
        """The connection ended: nothing of its credentials stays scheduled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- authorization ----------------------------------------------------------------

    @property
    def roles(self) -> tuple[str | None, ...]:
        """The roles every request is authorized for: the connection's, and behind a
        proxy role the original principal's as well (both must be allowed, as Pulsar)."""
        if self.original_principal is None:
            return (self.identity.role,)
        return (self.identity.role, self.original_principal)

    async def check_topic(
        self, topic: str, operation: TopicOperation, subscription: str | None = None
    ) -> None:
        """Raises AuthorizationError unless this connection's roles may do ``operation``."""
        access = self._conn.service.access
        if access.enabled:
            name = TopicName.parse(topic)
            for role in self.roles:
                await access.check_topic(role, name, operation, subscription)

    async def authorized(
        self, topic: str, operation: TopicOperation, work: Coroutine[Any, Any, Command]
    ) -> Command:
        """``work``'s answer if this connection's role may do ``operation`` on ``topic``;
        raises AuthorizationError otherwise (``work`` is then closed, never run)."""
        try:
            await self.check_topic(topic, operation)
        except BaseException:
            work.close()
            raise
        return await work

    async def check_namespace(self, namespace: str) -> None:
        """Raises AuthorizationError unless the role may list ``namespace``'s topics."""
        access = self._conn.service.access
        if access.enabled:
            name = NamespaceName.parse(namespace)
            for role in self.roles:
                await access.check_namespace(role, name)
