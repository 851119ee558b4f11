"""Entry point of the ``magnetar`` command.

Expected errors of every sub-command end as one ``Error: ...`` line and exit status 1
(:class:`CliGroup`); usage errors exit 2.

Sub-commands are imported when they run (:class:`LazyCommandGroup`): ``magnetar standalone``
does not pay for the admin, client, perf and functions command trees (the client library,
the functions' configuration and its schema tooling), which were a quarter of its start-up.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Final

import click

from magnetar import __version__
from magnetar.cli.client_config import CONFIG_ENV, ClientConfigError, default_config_path
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import CliGroup

LAZY_COMMANDS: Final[dict[str, str]] = {
    "broker": "magnetar.cli.broker_cmd:broker",
    "bookie": "magnetar.cli.bookie_cmd:bookie",
    "standalone": "magnetar.cli.standalone_cmd:standalone",
    "local-cluster": "magnetar.cli.local_cluster_cmd:local_cluster",
    "proxy": "magnetar.cli.proxy_cmd:proxy",
    "admin": "magnetar.cli.admin_cmd:admin",
    "client": "magnetar.cli.client_cmd:client",
    "perf": "magnetar.cli.perf_cmd:perf",
    "functions": "magnetar.cli.functions_cmd:functions",
    "tokens": "magnetar.cli.tokens_cmd:tokens",
}
"""Sub-command name -> ``module:attribute`` of its click command, imported on first use."""


class LazyCommandGroup(CliGroup, SuggestingGroup):
    """A :class:`CliGroup` whose sub-commands in :data:`LAZY_COMMANDS` are imported only when
    named (``magnetar --help`` imports them all, to show their help lines); a misspelt name
    gets the closest ones (:class:`SuggestingGroup`) without importing any."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = LAZY_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command), target
        return command


def _load_client_config(ctx: click.Context, param: click.Parameter, path: Path | None) -> None:
    """Defaults for admin/client/perf from client.conf (see :mod:`magnetar.cli.client_config`):
    the file given, else the default one when it exists."""
    from magnetar.cli.client_config import default_map, load

    if path is None:
        path = default_config_path()
        if not path.is_file():
            return
    try:
        ctx.default_map = default_map(load(path))
    except ClientConfigError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


@click.group(cls=LazyCommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="magnetar")
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    show_envvar=True,
    default=None,
    is_eager=True,
    expose_value=False,
    callback=_load_client_config,
    help="client.conf with webServiceUrl, brokerServiceUrl, authPlugin/authParams "
    "(default: ~/.config/magnetar/client.conf when it exists).",
)
def cli() -> None:
    """Magnetar: Pulsar's messaging, queuing and streaming model in Python."""


@cli.command(
    "functions-worker",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def functions_worker(ctx: click.Context) -> None:
    """A Functions Worker with its REST API on its own HTTP port (--port): joins the worker
    cluster of --coordination-topic and runs the instances it is assigned. --help lists
    its options; --config FILE reads Pulsar's keys (workerId, workerPort, pulsarServiceUrl,
    authenticationEnabled, ...), MAGNETAR_<OPTION> overrides them, flags override both."""
    import argparse

    from magnetar.auth.server_options import add_argparse_options
    from magnetar.cli.server_config_file import ConfigFileError, argparse_argv
    from magnetar.functions.__main__ import add_worker_arguments
    from magnetar.functions.__main__ import main as worker_main

    options = argparse.ArgumentParser(add_help=False)
    add_worker_arguments(options)
    add_argparse_options(options)
    try:
        argv = argparse_argv(options, ctx.args, "functions-worker")
    except ConfigFileError as exc:
        click.echo(f"magnetar functions-worker: {exc}", err=True)
        sys.exit(2)
    sys.exit(worker_main(argv, prog="magnetar functions-worker"))


def main() -> None:
    from magnetar.cli.server_setup import restore_stop_signals

    restore_stop_signals()  # first: a Ctrl+C during the imports below must count
    cli()


if __name__ == "__main__":
    main()
