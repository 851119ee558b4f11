"""Entry point of the ``magnetar`` command.

Expected errors of every sub-command end as one ``Error: ...`` line and exit status 1
(:class:`CliGroup`); usage errors exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from magnetar import __version__
from magnetar.cli import (
    admin_cmd,
    bookie_cmd,
    broker_cmd,
    client_cmd,
    functions_cmd,
    local_cluster_cmd,
    perf_cmd,
    standalone_cmd,
    tokens_cmd,
)
from magnetar.cli.client_config import CONFIG_ENV, ClientConfigError, default_config_path
from magnetar.cli.output import CliGroup


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


cli.add_command(broker_cmd.broker)
cli.add_command(bookie_cmd.bookie)
cli.add_command(standalone_cmd.standalone)


@cli.command(
    "functions-worker",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def functions_worker(ctx: click.Context) -> None:
    """A Functions Worker with its REST API on its own HTTP port (--port): joins the worker
    cluster of --coordination-topic and runs the instances it is assigned. --help lists
    its options."""
    from magnetar.functions.__main__ import main as worker_main

    sys.exit(worker_main(list(ctx.args), prog="magnetar functions-worker"))


cli.add_command(local_cluster_cmd.local_cluster)
cli.add_command(admin_cmd.admin)
cli.add_command(client_cmd.client)
cli.add_command(perf_cmd.perf)
cli.add_command(functions_cmd.functions)
cli.add_command(tokens_cmd.tokens)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
