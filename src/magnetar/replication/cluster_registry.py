"""The clusters this cluster knows: Pulsar's ClusterData JSON at ``/admin/clusters/<name>``
of the cluster's own metadata store (written by ``admin clusters create|update``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from magnetar.metadata.store import MetadataStore, NotFound

CLUSTERS_ROOT = "/admin/clusters"


@dataclass(frozen=True, slots=True)
class RemoteCluster:
    """Where a remote cluster's brokers answer lookups."""

    name: str
    broker_service_url: str
    broker_service_url_tls: str = ""


class ClusterNotRegistered(LookupError):
    """The cluster has no ClusterData, or none with a ``brokerServiceUrl``."""


async def remote_cluster(store: MetadataStore, name: str) -> RemoteCluster:
    """The registered data of cluster ``name``. Raises :class:`ClusterNotRegistered`."""
    try:
        got = await store.get(f"{CLUSTERS_ROOT}/{name}")
    except NotFound:
        raise ClusterNotRegistered(name) from None
    try:
        data = json.loads(got.value) if got.value.strip() else {}
    except ValueError:
        data = {}
    url = data.get("brokerServiceUrl") if isinstance(data, dict) else None
    if not isinstance(url, str) or not url:
        raise ClusterNotRegistered(f"{name}: no brokerServiceUrl")
    tls = data.get("brokerServiceUrlTls")
    return RemoteCluster(name, url, tls if isinstance(tls, str) else "")
