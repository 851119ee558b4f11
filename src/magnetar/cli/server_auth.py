"""The security options of the servers (``magnetar standalone`` and ``magnetar broker``) as
click options, built from their one declaration
(:data:`magnetar.auth.server_options.SERVER_AUTH_OPTIONS`, which ``magnetar
functions-worker`` uses too). :func:`server_auth_options` hands the command one checked
:class:`~magnetar.auth.server_options.ServerAuth` instead of thirteen values.

Settings that cannot work (a key that does not load, an unknown provider, authorization
without authentication, unusable broker-client parameters) end the command before anything
starts, with one line naming the problem and exit status 2.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from magnetar.auth.server_options import (
    SECONDS_MIN,
    SERVER_AUTH_OPTIONS,
    OptionKind,
    OptionSpec,
    ServerAuth,
    ServerAuthError,
    server_auth_from,
)

__all__ = ["ServerAuth", "server_auth_option_values", "server_auth_options"]


def _click_option(spec: OptionSpec) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if spec.kind is OptionKind.SWITCH:
        return click.option(
            f"--{spec.name}/--no-{spec.name}",
            spec.key,
            default=spec.default,
            show_default=True,
            help=spec.help,
        )
    return click.option(
        f"--{spec.name}",
        spec.key,
        default=spec.default,
        show_default=spec.default not in (None, ""),
        type=click.FloatRange(min=SECONDS_MIN) if spec.kind is OptionKind.SECONDS else str,
        metavar=spec.metavar,
        envvar=spec.envvar,
        help=spec.help,
    )


def server_auth_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options to a click command, which receives them as one
    ``server_auth: ServerAuth`` argument."""

    @functools.wraps(f)
    def command(*args: Any, server_auth_values: dict[str, Any], **kwargs: Any) -> Any:
        try:
            server_auth = server_auth_from(server_auth_values)
        except ServerAuthError as exc:
            ctx = click.get_current_context(silent=True)
            name = f"magnetar {ctx.info_name}" if ctx is not None else "magnetar"
            click.echo(f"{name}: {exc}", err=True)
            sys.exit(2)
        return f(*args, server_auth=server_auth, **kwargs)

    return server_auth_option_values(command)


def server_auth_option_values(f: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the same options to a command that passes them on to the servers it starts
    (``magnetar local-cluster``): it receives them unchecked, as one
    ``server_auth_values: dict[str, Any]`` keyed by :attr:`OptionSpec.key`."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = {spec.key: kwargs.pop(spec.key) for spec in SERVER_AUTH_OPTIONS}
        return f(*args, server_auth_values=values, **kwargs)

    decorated: Callable[..., Any] = command
    for spec in reversed(SERVER_AUTH_OPTIONS):
        decorated = _click_option(spec)(decorated)
    return decorated
