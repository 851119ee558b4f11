"""``magnetar admin clusters list|get|create|update|delete|update-peer-clusters|get-peer-clusters``, ``magnetar admin brokers
healthcheck|list|leader-broker|get-runtime-config`` and ``magnetar admin bookies
list-bookies|racks-placement|get-bookie-rack|set-bookie-rack|delete-bookie-rack``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import output_option, printer


@click.group(cls=SuggestingGroup)
def clusters() -> None:
    """Clusters known to the metadata store."""


@clusters.command("list")
@output_option
def list_() -> None:
    """List clusters."""
    printer().result(rest().get("/admin/v2/clusters"))


@clusters.command()
@click.argument("cluster")
@output_option
def get(cluster: str) -> None:
    """Show a cluster's service URLs."""
    printer().result(rest().get(_cluster_path(cluster)))


def _cluster_path(cluster: str) -> str:
    return f"/admin/v2/clusters/{quote(cluster, safe='')}"


def _url_options(command: Any) -> Any:
    """pulsar-admin's ``--url``, ``--url-secure``, ``--broker-url``, ``--broker-url-secure``."""
    for decorator in reversed(
        (
            click.option("--url", default=None, help="The cluster's HTTP service URL."),
            click.option("--url-secure", default=None, help="Its HTTPS service URL."),
            click.option("--broker-url", default=None, help="Its pulsar:// broker URL."),
            click.option("--broker-url-secure", default=None, help="Its pulsar+ssl:// URL."),
        )
    ):
        command = decorator(command)
    return command


def _cluster_data(
    url: str | None, url_secure: str | None, broker_url: str | None, broker_url_secure: str | None
) -> dict[str, str]:
    fields = {
        "serviceUrl": url,
        "serviceUrlTls": url_secure,
        "brokerServiceUrl": broker_url,
        "brokerServiceUrlTls": broker_url_secure,
    }
    data = {key: value for key, value in fields.items() if value}
    if not data:
        raise click.UsageError(
            "give at least one of --url, --url-secure, --broker-url, --broker-url-secure"
        )
    return data


@clusters.command()
@click.argument("cluster")
@_url_options
@output_option
def create(
    cluster: str,
    url: str | None,
    url_secure: str | None,
    broker_url: str | None,
    broker_url_secure: str | None,
) -> None:
    """Register a cluster (another cluster to replicate with) and its service URLs."""
    rest().put(
        _cluster_path(cluster), _cluster_data(url, url_secure, broker_url, broker_url_secure)
    )
    printer().done(f"Cluster {cluster} created", cluster=cluster)


@clusters.command()
@click.argument("cluster")
@_url_options
@output_option
def update(
    cluster: str,
    url: str | None,
    url_secure: str | None,
    broker_url: str | None,
    broker_url_secure: str | None,
) -> None:
    """Change a cluster's service URLs (its peer clusters are kept)."""
    current = rest().get(_cluster_path(cluster))
    data = {**current, **_cluster_data(url, url_secure, broker_url, broker_url_secure)}
    rest().post(_cluster_path(cluster), data)
    printer().done(f"Cluster {cluster} updated", cluster=cluster)


@clusters.command()
@click.argument("cluster")
@output_option
def delete(cluster: str) -> None:
    """Forget a cluster (not the broker's own)."""
    rest().delete(_cluster_path(cluster))
    printer().done(f"Cluster {cluster} deleted", cluster=cluster)


@clusters.command("update-peer-clusters")
@click.argument("cluster")
@click.option(
    "--peer-clusters", required=True, help="Comma-separated peer cluster names ('' for none)."
)
@output_option
def update_peer_clusters(cluster: str, peer_clusters: str) -> None:
    """Set a cluster's peerClusterNames."""
    peers = [p.strip() for p in peer_clusters.split(",") if p.strip()]
    rest().post(f"{_cluster_path(cluster)}/peers", peers)
    printer().done(f"Peer clusters of {cluster} set to {peers}", cluster=cluster, peers=peers)


@clusters.command("get-peer-clusters")
@click.argument("cluster")
@output_option
def get_peer_clusters(cluster: str) -> None:
    """Show a cluster's peerClusterNames."""
    printer().result(rest().get(f"{_cluster_path(cluster)}/peers"))


@click.group(cls=SuggestingGroup)
def brokers() -> None:
    """Brokers: health, the active brokers, the leader (controller)."""


@brokers.command("list")
@click.argument("cluster", default="standalone")
@output_option
def list_brokers(cluster: str) -> None:
    """List the active brokers of a cluster (their ids, host:http-port)."""
    printer().result(rest().get(f"/admin/v2/brokers/{quote(cluster, safe='')}"))


@brokers.command("leader-broker")
@output_option
def leader_broker() -> None:
    """Show the leader broker: in a cluster, the controller and its epoch."""
    printer().result(rest().get("/admin/v2/brokers/leaderBroker"))


@brokers.command("get-runtime-config")
@output_option
def get_runtime_config() -> None:
    """Show the broker's effective configuration (Pulsar's broker.conf keys where they
    exist; the broker the admin URL names)."""
    printer().result(rest().get("/admin/v2/brokers/configuration/runtime"))


_CONFIGURATION = "/admin/v2/brokers/configuration"


@brokers.command("list-dynamic-config")
@output_option
def list_dynamic_config() -> None:
    """List the settings update-dynamic-config can change."""
    printer().result(rest().get(_CONFIGURATION))


@brokers.command("get-all-dynamic-config")
@output_option
def get_all_dynamic_config() -> None:
    """Show the dynamic configuration values set (name -> value)."""
    printer().result(rest().get(f"{_CONFIGURATION}/values"))


@brokers.command("update-dynamic-config")
@click.option("--config", "config", required=True, help="The setting (list-dynamic-config).")
@click.option("--value", required=True, help="Its new value.")
@output_option
def update_dynamic_config(config: str, value: str) -> None:
    """Change a setting on every broker of the cluster, without a restart."""
    rest().post(f"{_CONFIGURATION}/{quote(config, safe='')}/{quote(value, safe='')}")
    printer().done(f"{config} set to {value}", config=config, value=value)


@brokers.command("delete-dynamic-config")
@click.option("--config", "config", required=True, help="The setting.")
@output_option
def delete_dynamic_config(config: str) -> None:
    """Remove a setting's dynamic value (the broker's configured one applies again)."""
    rest().delete(f"{_CONFIGURATION}/{quote(config, safe='')}")
    printer().done(f"Dynamic value of {config} removed", config=config)


@brokers.command()
@output_option
def healthcheck() -> None:
    """Check that the broker answers (GET /admin/v2/brokers/health); exit 1 if not."""
    answer = rest().get("/admin/v2/brokers/health")
    out = printer()
    if out.json:
        out.result({"healthy": True, "answer": answer})
    else:
        click.echo(answer if isinstance(answer, str) and answer else "ok")


@click.group("broker-stats", cls=SuggestingGroup)
def broker_stats() -> None:
    """Broker statistics: the load report the controller places bundles by."""


@broker_stats.command("load-report")
@output_option
def load_report() -> None:
    """Show the broker's latest load report (CPU in percent of one core, message rates,
    topics, connections, per-bundle rates): the broker the admin URL names."""
    printer().result(rest().get("/admin/v2/broker-stats/load-report"))


@click.group(cls=SuggestingGroup)
def bookies() -> None:
    """Bookies: the registered storage nodes and their rack placement."""


@bookies.command("list-bookies")
@output_option
def list_bookies() -> None:
    """List the registered bookies (writable and read-only)."""
    printer().result(rest().get("/admin/v2/bookies/all"))


@bookies.command("racks-placement")
@output_option
def racks_placement() -> None:
    """Show the rack placement of the bookies ({} when none is configured)."""
    printer().result(rest().get("/admin/v2/bookies/racks-info"))


@bookies.command("get-bookie-rack")
@click.option("--bookie", "-b", required=True, help="the bookie id, host:port")
@output_option
def get_bookie_rack(bookie: str) -> None:
    """Show one bookie's rack placement."""
    printer().result(rest().get(f"/admin/v2/bookies/racks-info/{quote(bookie, safe='')}"))


@bookies.command("set-bookie-rack")
@click.option("--bookie", "-b", required=True, help="the bookie id, host:port")
@click.option("--rack", "-r", required=True, help="its rack, e.g. /region-1/rack-1")
@click.option("--group", "-g", default="default", show_default=True, help="the bookie group")
@click.option("--hostname", default="", help="the bookie's host name (shown, not used)")
@output_option
def set_bookie_rack(bookie: str, rack: str, group: str, hostname: str) -> None:
    """Set one bookie's rack: new ledgers spread their bookies over racks."""
    rest().post(
        f"/admin/v2/bookies/racks-info/{quote(bookie, safe='')}",
        {"rack": rack, "hostname": hostname},
        group=group,
    )
    printer().done(f"Rack of bookie {bookie} set to {rack}", bookie=bookie, rack=rack)


@bookies.command("delete-bookie-rack")
@click.option("--bookie", "-b", required=True, help="the bookie id, host:port")
@output_option
def delete_bookie_rack(bookie: str) -> None:
    """Remove one bookie's rack placement (it counts as on the default rack)."""
    rest().delete(f"/admin/v2/bookies/racks-info/{quote(bookie, safe='')}")
    printer().done(f"Rack of bookie {bookie} removed", bookie=bookie)
