"""Authentication hooks: what goes into CONNECT (and into AUTH_RESPONSE on a refresh).

An authentication object has ``auth_method_name() -> str`` and ``auth_data() -> bytes``
(called for every new connection and every AUTH_CHALLENGE, so tokens may rotate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Authentication(Protocol):
    def auth_method_name(self) -> str: ...

    def auth_data(self) -> bytes: ...


class AuthenticationToken:
    """JWT token authentication (method ``token``). ``token`` is the token itself, or a
    callable returning the current token (called on every connect and refresh)."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def auth_method_name(self) -> str:
        return "token"

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode()


class AuthenticationBasic:
    """HTTP-basic style credentials (method ``basic``, data ``user:password``)."""

    def __init__(self, username: str, password: str, method_name: str = "basic") -> None:
        self._data = f"{username}:{password}".encode()
        self._method = method_name

    def auth_method_name(self) -> str:
        return self._method

    def auth_data(self) -> bytes:
        return self._data
