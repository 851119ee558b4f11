"""Geo-replication between clusters (docs/geo-replication.md): per topic and remote cluster,
a replicator forwards the topic's messages to the remote cluster
(:mod:`magnetar.replication.replicator`, the sans-IO rules;
:mod:`magnetar.replication.persistent_replicator`, its asyncio shell), started by the topic's
owner for each remote cluster of the topic's replication clusters
(:mod:`magnetar.replication.policy`) through the broker's topic hooks
(:mod:`magnetar.replication.manager`); where remote clusters answer comes from this
cluster's registry (:mod:`magnetar.replication.cluster_registry`); topic stats and metrics
read :mod:`magnetar.replication.stats`."""
