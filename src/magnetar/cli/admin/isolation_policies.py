"""``magnetar admin ns-isolation-policy set|get|list|delete`` (Pulsar's spelling): which
brokers own which namespaces in a cluster (docs/cluster.md, "Namespace isolation")."""

from __future__ import annotations

from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import output_option, printer


def _path(cluster: str, policy: str | None = None) -> str:
    base = f"/admin/v2/clusters/{quote(cluster, safe='')}/namespaceIsolationPolicies"
    return base if policy is None else f"{base}/{quote(policy, safe='')}"


def _regexes(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _failover_params(value: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{item!r} is not key=value (min_limit=1,usage_threshold=80)",
                param_hint="--auto-failover-policy-params",
            )
        params[key.strip()] = val.strip()
    return params


@click.group("ns-isolation-policy", cls=SuggestingGroup)
def ns_isolation_policy() -> None:
    """Namespace isolation policies: pin namespaces to primary brokers, with secondaries
    to fail over to."""


@ns_isolation_policy.command("set")
@click.argument("cluster")
@click.argument("policy")
@click.option("--namespaces", required=True, help="Comma-separated regexes of tenant/namespace.")
@click.option(
    "--primary", required=True, help="Comma-separated regexes of primary brokers (host or id)."
)
@click.option("--secondary", default=None, help="Comma-separated regexes of secondary brokers.")
@click.option(
    "--auto-failover-policy-type",
    default="min_available",
    show_default=True,
    help="The failover policy (Pulsar knows min_available only).",
)
@click.option(
    "--auto-failover-policy-params",
    required=True,
    metavar="min_limit=N,usage_threshold=P",
    help="Fewer than min_limit live primaries: secondaries may own the namespaces too.",
)
@output_option
def set_policy(
    cluster: str,
    policy: str,
    namespaces: str,
    primary: str,
    secondary: str | None,
    auto_failover_policy_type: str,
    auto_failover_policy_params: str,
) -> None:
    """Create or replace POLICY in CLUSTER."""
    body = {
        "namespaces": _regexes(namespaces),
        "primary": _regexes(primary),
        "secondary": _regexes(secondary),
        "auto_failover_policy": {
            "policy_type": auto_failover_policy_type,
            "parameters": _failover_params(auto_failover_policy_params),
        },
    }
    rest().post(_path(cluster, policy), body)
    printer().done(f"Isolation policy {policy} set", cluster=cluster, policy=policy)


@ns_isolation_policy.command("get")
@click.argument("cluster")
@click.argument("policy")
@output_option
def get_policy(cluster: str, policy: str) -> None:
    """Show POLICY of CLUSTER."""
    printer().result(rest().get(_path(cluster, policy)))


@ns_isolation_policy.command("list")
@click.argument("cluster")
@output_option
def list_policies(cluster: str) -> None:
    """Show every isolation policy of CLUSTER (by name)."""
    printer().result(rest().get(_path(cluster)))


@ns_isolation_policy.command("delete")
@click.argument("cluster")
@click.argument("policy")
@output_option
def delete_policy(cluster: str, policy: str) -> None:
    """Delete POLICY of CLUSTER."""
    rest().delete(_path(cluster, policy))
    printer().done(f"Isolation policy {policy} deleted", cluster=cluster, policy=policy)
