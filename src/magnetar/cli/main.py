"""Entry point of the ``magnetar`` command.

Each sub-command either works or says plainly that it is not built yet and exits with
status 2, so a script never mistakes a missing part for a success. Expected errors of every
sub-command end as one ``Error: ...`` line and exit status 1 (:class:`CliGroup`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from magnetar import __version__
from magnetar.cli import (
    admin_cmd,
    bookie_cmd,
    client_cmd,
    local_cluster_cmd,
    perf_cmd,
    standalone_cmd,
    tokens_cmd,
)
from magnetar.cli.client_config import CONFIG_ENV, ClientConfigError, default_config_path
from magnetar.cli.output import CliGroup

NOT_BUILT_EXIT_CODE = 2


def _not_built(what: str) -> None:
    click.echo(f"magnetar: '{what}' is not built yet in this version ({__version__}).", err=True)
    sys.exit(NOT_BUILT_EXIT_CODE)


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


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def broker() -> None:
    """A broker (binary protocol on 6650, HTTP on 8080) for a cluster on ZooKeeper."""
    _not_built("broker")


cli.add_command(bookie_cmd.bookie)
cli.add_command(standalone_cmd.standalone)


@cli.command(
    "functions-worker", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
def functions_worker() -> None:
    """A Functions Worker: runs Python functions, sources and sinks."""
    _not_built("functions-worker")


cli.add_command(local_cluster_cmd.local_cluster)
cli.add_command(admin_cmd.admin)
cli.add_command(client_cmd.client)
cli.add_command(perf_cmd.perf)
cli.add_command(tokens_cmd.tokens)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
