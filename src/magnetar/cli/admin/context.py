"""The state every ``magnetar admin`` sub-command shares: the admin REST client, built once."""

from __future__ import annotations

from dataclasses import dataclass

import click

from magnetar.admin_client import AdminClient


@dataclass(slots=True)
class AdminContext:
    admin_url: str
    timeout_s: float
    auth_token: str | None
    authorization: str | None = None
    """The ``Authorization`` header (from --auth-plugin/--auth-params); wins over the token."""
    _rest: AdminClient | None = None

    @property
    def rest(self) -> AdminClient:
        if self._rest is None:
            self._rest = AdminClient(
                self.admin_url,
                timeout_s=self.timeout_s,
                auth_token=self.auth_token,
                authorization=self.authorization,
            )
        return self._rest


def rest() -> AdminClient:
    """The REST client of the current ``magnetar admin`` invocation."""
    return click.get_current_context().ensure_object(AdminContextHolder).get().rest


class AdminContextHolder:
    """``ctx.obj`` of the admin group (click creates it with no arguments)."""

    def __init__(self) -> None:
        self.context: AdminContext | None = None

    def get(self) -> AdminContext:
        assert self.context is not None, "the admin group sets the context first"
        return self.context
