"""Geo-replication between clusters: per topic and remote cluster, a replicator forwards the
topic's messages to the remote cluster (:mod:`magnetar.replication.replicator`, a sans-IO
core; :mod:`magnetar.replication.shell`, its asyncio shell), started by the topic's owner
for each remote cluster of the topic's replication clusters
(:mod:`magnetar.replication.policy`, :mod:`magnetar.replication.manager`)."""
