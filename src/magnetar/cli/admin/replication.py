"""Replication clusters on the command line, as pulsar-admin spells them:
``namespaces set-clusters|get-clusters`` and ``topics set-replication-clusters|
get-replication-clusters|remove-replication-clusters`` (registered on their groups by
:mod:`magnetar.cli.admin.namespaces` and :mod:`magnetar.cli.admin.topics`)."""

from __future__ import annotations

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.output import output_option, printer


def _clusters(value: str) -> list[str]:
    clusters = [c.strip() for c in value.split(",") if c.strip()]
    if not clusters:
        raise click.UsageError("--clusters: give at least one cluster name")
    return clusters


@click.command("set-clusters")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@click.option("--clusters", "-c", required=True, help="Comma-separated replication clusters.")
@output_option
def set_clusters(namespace: str, clusters: str) -> None:
    """Set the clusters a namespace's topics are replicated to (the local one included)."""
    names = _clusters(clusters)
    rest().post(f"{namespace_path(namespace)}/replication", names)
    printer().done(
        f"Replication clusters of {namespace} set to {names}", namespace=namespace, clusters=names
    )


@click.command("get-clusters")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@output_option
def get_clusters(namespace: str) -> None:
    """Show a namespace's replication clusters."""
    printer().result(rest().get(f"{namespace_path(namespace)}/replication"))


@click.command("set-replication-clusters")
@click.argument("topic", type=TOPIC)
@click.option("--clusters", "-c", required=True, help="Comma-separated replication clusters.")
@output_option
def set_replication_clusters(topic: Topic, clusters: str) -> None:
    """Set the clusters one topic is replicated to (within its namespace's)."""
    names = _clusters(clusters)
    rest().post(f"{topic.path}/replication", names)
    printer().done(
        f"Replication clusters of {topic.full} set to {names}", topic=topic.full, clusters=names
    )


@click.command("get-replication-clusters")
@click.argument("topic", type=TOPIC)
@click.option(
    "--applied", "-ap", is_flag=True, help="The clusters in force (else the namespace's)."
)
@output_option
def get_replication_clusters(topic: Topic, applied: bool) -> None:
    """Show a topic's own replication clusters (nothing while it sets none)."""
    printer().result(rest().get(f"{topic.path}/replication", applied=str(applied).lower()))


@click.command("remove-replication-clusters")
@click.argument("topic", type=TOPIC)
@output_option
def remove_replication_clusters(topic: Topic) -> None:
    """Remove a topic's replication clusters (its namespace's apply)."""
    rest().delete(f"{topic.path}/replication")
    printer().done(f"Replication clusters of {topic.full} removed", topic=topic.full)
