"""``magnetar admin namespaces ...`` (``/admin/v2/namespaces``): lifecycle and policies.

Policy bodies follow Pulsar's REST API: retention ``{"retentionTimeInMinutes",
"retentionSizeInMB"}``, message TTL as a JSON int of seconds, deduplication as a JSON
bool, backlog quota ``{"limitSize", "limitTime", "policy"}`` with ``?backlogQuotaType=``.
"""

from __future__ import annotations

from urllib.parse import quote

import click

from magnetar.cli.admin import replication
from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import namespace_path, tenant_path
from magnetar.cli.admin.policy_commands import (
    NAMESPACE_POLICIES,
    NAMESPACE_TARGET,
    add_backlog_quota_commands,
    add_policy_commands,
    retention_body,
)
from magnetar.cli.admin.rest import AdminHttpError
from magnetar.cli.admin.units import duration_s
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import fail, output_option, printer

NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")
PRECONDITION_FAILED = 412
"""What the admin API answers when a namespace still has topics."""


@click.group(cls=SuggestingGroup)
def namespaces() -> None:
    """Namespaces: groups of topics sharing policies."""


@namespaces.command("list")
@click.argument("tenant")
@output_option
def list_(tenant: str) -> None:
    """List the namespaces of a tenant."""
    path = tenant_path(tenant).replace("/admin/v2/tenants/", "/admin/v2/namespaces/", 1)
    printer().result(rest().get(path))


@namespaces.command()
@NAMESPACE
@click.option(
    "--mode",
    type=click.Choice(["PERSISTENT", "NON_PERSISTENT", "ALL"], case_sensitive=False),
    default="PERSISTENT",
    show_default=True,
)
@output_option
def topics(namespace: str, mode: str) -> None:
    """List the topics of a namespace (partitions included)."""
    printer().result(rest().get(f"{namespace_path(namespace)}/topics", mode=mode.upper()))


@namespaces.command()
@NAMESPACE
@click.option("--clusters", "-c", default=None, help="Comma-separated replication clusters.")
@output_option
def create(namespace: str, clusters: str | None) -> None:
    """Create a namespace."""
    body = None
    if clusters:
        body = {"replication_clusters": [c.strip() for c in clusters.split(",") if c.strip()]}
    rest().put(namespace_path(namespace), body)
    printer().done(f"Namespace {namespace} created", namespace=namespace)


@namespaces.command()
@NAMESPACE
@click.option("--force", "-f", is_flag=True, help="Delete its topics too.")
@output_option
def delete(namespace: str, force: bool) -> None:
    """Delete a namespace (it must be empty unless --force)."""
    if force:
        rest().delete(namespace_path(namespace), force=True)
    else:
        try:
            rest().delete(namespace_path(namespace))
        except AdminHttpError as e:
            if e.status != PRECONDITION_FAILED:
                raise
            fail(f"{e} - use -f/--force to delete its topics too")
    printer().done(f"Namespace {namespace} deleted", namespace=namespace)


@namespaces.command()
@NAMESPACE
@output_option
def policies(namespace: str) -> None:
    """Show every policy of a namespace."""
    printer().result(rest().get(namespace_path(namespace)))


@namespaces.command()
@NAMESPACE
@output_option
def bundles(namespace: str) -> None:
    """Show a namespace's bundles (their boundaries)."""
    printer().result(rest().get(f"{namespace_path(namespace)}/bundles"))


@namespaces.command()
@NAMESPACE
@click.option("--bundle", "-b", default=None, help="One bundle, 0x…_0x… (default: every bundle).")
@output_option
def unload(namespace: str, bundle: str | None) -> None:
    """Unload a namespace's bundles: in a cluster they move to another broker, and their
    clients follow by themselves."""
    if bundle is None:
        rest().put(f"{namespace_path(namespace)}/unload")
        printer().done(f"Namespace {namespace} unloaded", namespace=namespace)
    else:
        rest().put(f"{namespace_path(namespace)}/{quote(bundle, safe='')}/unload")
        printer().done(f"Bundle {namespace}/{bundle} unloaded", namespace=namespace, bundle=bundle)


@namespaces.command("split-bundle")
@NAMESPACE
@click.option("--bundle", "-b", required=True, help="The bundle to split, 0x…_0x….")
@click.option(
    "--unload", "-u", is_flag=True, help="Unload the bundle first (always done here; accepted)."
)
@click.option(
    "--split-algorithm-name",
    "-san",
    default=None,
    help="How to split: range_equally_divide (the default and only one).",
)
@output_option
def split_bundle(
    namespace: str, bundle: str, unload: bool, split_algorithm_name: str | None
) -> None:
    """Split a bundle in two halves of its hash range; the controller assigns both, and the
    bundle's clients follow by themselves."""
    query: dict[str, object] = {"unload": str(unload).lower()}
    if split_algorithm_name is not None:
        query["splitAlgorithmName"] = split_algorithm_name
    rest().put(f"{namespace_path(namespace)}/{quote(bundle, safe='')}/split", **query)
    printer().done(f"Bundle {namespace}/{bundle} split", namespace=namespace, bundle=bundle)


# ------------------------------------------------------------------ retention


@namespaces.command("set-retention")
@NAMESPACE
@click.option("--size", "-s", required=True, help="Retention size: 10M, 2G, -1 (unlimited), 0.")
@click.option("--time", "-t", "time_", required=True, help="Retention time: 100m, 3h, 2d, -1, 0.")
@output_option
def set_retention(namespace: str, size: str, time_: str) -> None:
    """Keep acknowledged messages up to a size and an age."""
    body = retention_body(size, time_)
    rest().post(f"{namespace_path(namespace)}/retention", body)
    printer().done(f"Retention of {namespace} set", namespace=namespace, retention=body)


@namespaces.command("get-retention")
@NAMESPACE
@output_option
def get_retention(namespace: str) -> None:
    """Show a namespace's retention policy."""
    printer().result(rest().get(f"{namespace_path(namespace)}/retention"))


@namespaces.command("remove-retention")
@NAMESPACE
@output_option
def remove_retention(namespace: str) -> None:
    """Remove a namespace's retention policy (the broker default applies)."""
    rest().delete(f"{namespace_path(namespace)}/retention")
    printer().done(f"Retention of {namespace} removed", namespace=namespace)


# ------------------------------------------------------------------ message TTL


@namespaces.command("set-message-ttl")
@NAMESPACE
@click.option("--messageTTL", "-ttl", "ttl", required=True, help="TTL: 3600, 60m, 1h, 0 (off).")
@output_option
def set_message_ttl(namespace: str, ttl: str) -> None:
    """Expire unacknowledged messages older than the TTL."""
    seconds = duration_s(ttl)
    rest().post(f"{namespace_path(namespace)}/messageTTL", seconds)
    printer().done(
        f"Message TTL of {namespace} set to {seconds} s", namespace=namespace, ttl=seconds
    )


@namespaces.command("get-message-ttl")
@NAMESPACE
@output_option
def get_message_ttl(namespace: str) -> None:
    """Show a namespace's message TTL in seconds."""
    printer().result(rest().get(f"{namespace_path(namespace)}/messageTTL"))


@namespaces.command("remove-message-ttl")
@NAMESPACE
@output_option
def remove_message_ttl(namespace: str) -> None:
    """Remove a namespace's message TTL."""
    rest().delete(f"{namespace_path(namespace)}/messageTTL")
    printer().done(f"Message TTL of {namespace} removed", namespace=namespace)


# ------------------------------------------------------------------ deduplication


@namespaces.command("set-deduplication")
@NAMESPACE
@click.option("--enable/--disable", "-e/-d", "enable", required=True, default=None)
@output_option
def set_deduplication(namespace: str, enable: bool) -> None:
    """Enable or disable message deduplication for a namespace."""
    rest().post(f"{namespace_path(namespace)}/deduplication", enable)
    state = "enabled" if enable else "disabled"
    printer().done(f"Deduplication {state} on {namespace}", namespace=namespace, enabled=enable)


@namespaces.command("get-deduplication")
@NAMESPACE
@output_option
def get_deduplication(namespace: str) -> None:
    """Show whether deduplication is enabled for a namespace."""
    printer().result(rest().get(f"{namespace_path(namespace)}/deduplication"))


@namespaces.command("remove-deduplication")
@NAMESPACE
@output_option
def remove_deduplication(namespace: str) -> None:
    """Remove the namespace's deduplication setting (the broker default applies)."""
    rest().delete(f"{namespace_path(namespace)}/deduplication")
    printer().done(f"Deduplication setting of {namespace} removed", namespace=namespace)


# ------------------------------------------------------------------ backlog quota and the rest

add_backlog_quota_commands(namespaces, NAMESPACE_TARGET)
for _policy in NAMESPACE_POLICIES:
    add_policy_commands(namespaces, NAMESPACE_TARGET, _policy)


# ------------------------------------------------------------------ schema policies

_STRATEGIES = click.Choice(
    [
        "UNDEFINED",
        "ALWAYS_INCOMPATIBLE",
        "ALWAYS_COMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    ],
    case_sensitive=False,
)


@namespaces.command("set-schema-compatibility-strategy")
@NAMESPACE
@click.option("--compatibility", "-c", type=_STRATEGIES, required=True, help="The strategy.")
@output_option
def set_schema_compatibility_strategy(namespace: str, compatibility: str) -> None:
    """Set how new schema versions must relate to the existing ones."""
    strategy = compatibility.upper()
    rest().put(f"{namespace_path(namespace)}/schemaCompatibilityStrategy", strategy)
    printer().done(
        f"Schema compatibility strategy of {namespace} set to {strategy}",
        namespace=namespace,
        strategy=strategy,
    )


@namespaces.command("get-schema-compatibility-strategy")
@NAMESPACE
@output_option
def get_schema_compatibility_strategy(namespace: str) -> None:
    """Show a namespace's schema compatibility strategy (UNDEFINED: the broker's, FULL)."""
    printer().result(rest().get(f"{namespace_path(namespace)}/schemaCompatibilityStrategy"))


@namespaces.command("set-schema-validation-enforce")
@NAMESPACE
@click.option("--enable/--disable", "-e/-d", "enable", required=True, default=None)
@output_option
def set_schema_validation_enforce(namespace: str, enable: bool) -> None:
    """Refuse (or allow) producers without a schema on topics that have one."""
    rest().post(f"{namespace_path(namespace)}/schemaValidationEnforced", enable)
    state = "enforced" if enable else "not enforced"
    printer().done(f"Schema validation {state} on {namespace}", namespace=namespace, enabled=enable)


@namespaces.command("get-schema-validation-enforce")
@NAMESPACE
@output_option
def get_schema_validation_enforce(namespace: str) -> None:
    """Show whether schema validation is enforced on a namespace."""
    printer().result(rest().get(f"{namespace_path(namespace)}/schemaValidationEnforced"))


@namespaces.command("set-is-allow-auto-update-schema")
@NAMESPACE
@click.option("--enable/--disable", "-e/-d", "enable", required=True, default=None)
@output_option
def set_is_allow_auto_update_schema(namespace: str, enable: bool) -> None:
    """Let producers and consumers add schema versions (or only reuse existing ones)."""
    rest().post(f"{namespace_path(namespace)}/isAllowAutoUpdateSchema", enable)
    state = "allowed" if enable else "not allowed"
    printer().done(
        f"Schema auto update {state} on {namespace}", namespace=namespace, enabled=enable
    )


@namespaces.command("get-is-allow-auto-update-schema")
@NAMESPACE
@output_option
def get_is_allow_auto_update_schema(namespace: str) -> None:
    """Show whether clients may add schema versions (no output while unset: allowed)."""
    printer().result(rest().get(f"{namespace_path(namespace)}/isAllowAutoUpdateSchema"))


# ------------------------------------------------------------------ replication clusters

namespaces.add_command(replication.set_clusters)
namespaces.add_command(replication.get_clusters)
