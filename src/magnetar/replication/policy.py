"""Which clusters a topic replicates to, from its namespace's and its own policies.

The namespace's ``replication_clusters`` apply unless the topic's ``TopicPolicies`` set
``replicationClusters`` (Pulsar's topic-level override). The topic replicates to every
cluster of that list except the local one; a list without the local cluster, or with it
alone, means no replication.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker.policies import Policies, TopicPolicies

TOPIC_POLICY_KEY = "replicationClusters"
"""The ``TopicPolicies`` JSON field of the topic-level override (Pulsar's name)."""


def topic_replication_clusters(policies: TopicPolicies | None) -> tuple[str, ...] | None:
    """The topic-level override, or None when the topic sets none (a malformed stored
    value counts as none)."""
    if policies is None:
        return None
    value = policies.extra.get(TOPIC_POLICY_KEY)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def effective_clusters(namespace: Policies | None, topic: TopicPolicies | None) -> tuple[str, ...]:
    """The replication clusters in force for a topic: its override, else its namespace's."""
    own = topic_replication_clusters(topic)
    if own is not None:
        return own
    return namespace.replication_clusters if namespace is not None else ()


def remote_clusters(local: str, clusters: Sequence[str]) -> frozenset[str]:
    """The clusters a topic of cluster ``local`` replicates to: ``clusters`` but ``local``,
    and none when ``local`` is not among them (the topic is not replicated here)."""
    if local not in clusters:
        return frozenset()
    return frozenset(c for c in clusters if c != local)
