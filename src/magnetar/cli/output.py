"""How the ``admin``, ``client`` and ``perf`` commands print results and errors.

Two output modes, chosen with ``--output`` (``text`` by default, ``json`` for machines):

* ``text``: for people. Lists print one item per line (easy to pipe, as ``pulsar-admin``
  does); objects print as indented JSON, highlighted when stdout is a terminal; tables and
  live displays are drawn with rich only when stdout is a terminal.
* ``json``: exactly one JSON document on stdout per result (``client consume`` prints one
  JSON object per line, NDJSON), nothing decorative; diagnostics go to stderr.

Errors: :class:`CliGroup`, the root ``magnetar`` group, turns operating errors of every
sub-command (an HTTP 4xx/5xx, an unreachable service, a broker error, a busy port, a data
directory in use) into one ``Error: ...`` line on stderr and exit status 1, with no traceback.
Bad arguments keep click's usage message and exit status 2.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from typing import Any, NoReturn

import click

ERROR_EXIT_CODE = 1


class OutputFormat(enum.Enum):
    TEXT = "text"
    JSON = "json"


OUTPUT_CHOICE = click.Choice([f.value for f in OutputFormat], case_sensitive=False)


class CommandFailed(click.ClickException):
    """An operating error already phrased for the user; exits with status 1."""

    exit_code = ERROR_EXIT_CODE


def fail(message: str) -> NoReturn:
    raise CommandFailed(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# asyncio's and uvloop's create_server: "error while attempting to bind on address
# ('127.0.0.1', 6650): address already in use"
_BIND_FAILED = re.compile(r"error while attempting to bind on address \('([^']*)', (\d+)\): (.*)")


def _os_error_text(e: OSError) -> str:
    """The error without its ``[Errno N]`` prefix, with the file when it names one, and a
    failed bind as ``cannot listen on host:port: reason``."""
    text = e.strerror or str(e) or type(e).__name__
    bind = _BIND_FAILED.fullmatch(text)
    if bind is not None:
        host, port, reason = bind.groups()
        return f"cannot listen on {host}:{port}: {reason}"
    if e.filename is not None:
        text = f"{text}: {e.filename}"
    return text


class CliGroup(click.Group):
    """The ``magnetar`` command: expected errors become one line instead of a traceback.

    One place for every sub-command (``standalone``, ``bookie``, ``admin``, ``client``,
    ``perf``): :class:`magnetar.common.errors.MagnetarError` (admin HTTP errors, client and
    broker errors, a data directory held by another process) and :class:`OSError` (a busy
    port, connection refused, DNS, timeouts) are printed as ``Error: <what is wrong>`` on
    stderr with exit status 1. Bad arguments keep click's usage message and exit status 2.
    Programming errors still raise with a traceback.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from magnetar.common.errors import MagnetarError

        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except MagnetarError as e:
            raise CommandFailed(_one_line(str(e) or type(e).__name__)) from None
        except OSError as e:  # TimeoutError and ConnectionError included
            raise CommandFailed(_one_line(_os_error_text(e))) from None


def log_client_warnings() -> None:
    """Client warnings (such as what a lookup is waiting for while a broker is down) go to
    stderr as plain lines, never to stdout where results are."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


class Printer:
    """Prints results in the chosen :class:`OutputFormat`. One per command invocation."""

    def __init__(self, fmt: OutputFormat) -> None:
        self.format = fmt
        self.terminal = stdout_is_terminal()

    @property
    def json(self) -> bool:
        return self.format is OutputFormat.JSON

    def console(self) -> Any:
        """A rich console on stdout (colour only when it is a terminal)."""
        from rich.console import Console

        return Console(highlight=self.terminal, soft_wrap=True)

    def result(self, value: Any) -> None:
        """Print a command's result: a JSON document, a list, a mapping or a scalar."""
        if self.json:
            click.echo(json.dumps(value, separators=(",", ":"), sort_keys=False))
            return
        if value is None:
            return
        if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            for item in value:
                click.echo(item)
            return
        if isinstance(value, dict | list):
            text = json.dumps(value, indent=2)
            if self.terminal:
                from rich.syntax import Syntax

                self.console().print(Syntax(text, "json", background_color="default"))
            else:
                click.echo(text)
            return
        click.echo(value if isinstance(value, str) else json.dumps(value))

    def done(self, message: str, **fields: Any) -> None:
        """Report a successful action without a result body (a PUT/POST/DELETE)."""
        if self.json:
            click.echo(json.dumps({"ok": True, "message": message, **fields}))
        else:
            click.echo(message)

    def note(self, message: str) -> None:
        """A diagnostic for people, always on stderr (never mixed with JSON on stdout)."""
        click.echo(message, err=True)


def output_option(f: Any) -> Any:
    """``--output text|json`` on a command; the innermost given value wins."""

    def store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.meta["magnetar.output"] = OutputFormat(value.lower())

    return click.option(
        "--output",
        type=OUTPUT_CHOICE,
        default=None,
        expose_value=False,
        is_eager=True,
        callback=store,
        help="Output format: text (for people, default) or json (for machines).",
    )(f)


def printer() -> Printer:
    """The printer for the current click context (``--output`` given anywhere above)."""
    ctx = click.get_current_context()
    return Printer(ctx.meta.get("magnetar.output", OutputFormat.TEXT))
