"""``magnetar admin``: administer tenants, namespaces, topics and subscriptions, and the
Functions Worker's functions, sources and sinks, over the admin REST API (mirrors
``pulsar-admin``).

::

    magnetar admin --admin-url http://localhost:8080 topics stats my-topic
    magnetar admin --output json tenants list
    magnetar admin namespaces set-retention public/default --size 1G --time 3h

Exit status: 0 on success, 1 on an operating error (the server's ``reason`` or a one-line
connection error on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import click

from magnetar.cli.admin import (  # noqa: F401  (add commands to groups)
    offload_policies,
    permissions,
    rates,
)
from magnetar.cli.admin.clusters import bookies, broker_stats, brokers, clusters
from magnetar.cli.admin.context import AdminContext, AdminContextHolder
from magnetar.cli.admin.functions import functions, functions_worker, sinks, sources
from magnetar.cli.admin.isolation_policies import ns_isolation_policy
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.schemas import schemas
from magnetar.cli.admin.tenants import tenants
from magnetar.cli.admin.topics import topics
from magnetar.cli.auth_options import auth_options, parse_auth
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import output_option

DEFAULT_ADMIN_URL = "http://localhost:8080"


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--admin-url",
    "--url",
    envvar="MAGNETAR_ADMIN_URL",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    show_envvar=True,
    help="The admin REST URL of the brokers; a list (http://h1:8080,h2:8080) fails over.",
)
@click.option(
    "--timeout", "timeout_s", default=30.0, show_default=True, help="Seconds per request."
)
@click.option("--auth-token", envvar="MAGNETAR_AUTH_TOKEN", default=None, help="Bearer token.")
@auth_options
@output_option
@click.pass_context
def admin(
    ctx: click.Context,
    admin_url: str,
    timeout_s: float,
    auth_token: str | None,
    auth_plugin: str | None,
    auth_params: str | None,
) -> None:
    """Administer tenants, namespaces, topics and subscriptions (mirrors pulsar-admin)."""
    auth = parse_auth(auth_plugin, auth_params, auth_token)
    ctx.ensure_object(AdminContextHolder).context = AdminContext(
        admin_url, timeout_s, auth_token, auth.http_authorization()
    )


for group in (
    tenants,
    namespaces,
    topics,
    schemas,
    clusters,
    ns_isolation_policy,
    brokers,
    broker_stats,
    bookies,
    functions,
    sources,
    sinks,
    functions_worker,
):
    admin.add_command(group)
