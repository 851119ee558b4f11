"""``magnetar admin``: administer tenants, namespaces, topics and subscriptions over the
admin REST API (mirrors ``pulsar-admin``).

::

    magnetar admin --admin-url http://localhost:8080 topics stats my-topic
    magnetar admin --output json tenants list
    magnetar admin namespaces set-retention public/default --size 1G --time 3h

Exit status: 0 on success, 1 on an operating error (the server's ``reason`` or a one-line
connection error on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import click

from magnetar.cli.admin.clusters import bookies, brokers, clusters
from magnetar.cli.admin.context import AdminContext, AdminContextHolder
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.schemas import schemas
from magnetar.cli.admin.tenants import tenants
from magnetar.cli.admin.topics import topics
from magnetar.cli.output import output_option

DEFAULT_ADMIN_URL = "http://localhost:8080"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--admin-url",
    "--url",
    envvar="MAGNETAR_ADMIN_URL",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    show_envvar=True,
    help="The admin REST URL of a broker.",
)
@click.option(
    "--timeout", "timeout_s", default=30.0, show_default=True, help="Seconds per request."
)
@click.option("--auth-token", envvar="MAGNETAR_AUTH_TOKEN", default=None, help="Bearer token.")
@output_option
@click.pass_context
def admin(ctx: click.Context, admin_url: str, timeout_s: float, auth_token: str | None) -> None:
    """Administer tenants, namespaces, topics and subscriptions (mirrors pulsar-admin)."""
    ctx.ensure_object(AdminContextHolder).context = AdminContext(admin_url, timeout_s, auth_token)


for group in (tenants, namespaces, topics, schemas, clusters, brokers, bookies):
    admin.add_command(group)
