"""Resolution: what applies to one topic, per setting the topic's override, else the
namespace's policy, else the broker's default (:class:`BrokerDefaults`, from
``BrokerConfig``), as an :class:`EffectivePolicies` in the units the broker and the managed
ledger use. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.backlog_quota import (
    NAMESPACE_STORAGE_QUOTA_KEY,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    NamespaceStorageQuota,
    namespace_storage_quota_of,
)
from magnetar.broker.policies.inactive_topic import (
    DEFAULT_INACTIVE_TOPIC_POLICIES,
    InactiveTopicPolicies,
    delete_mode,
)
from magnetar.broker.policies.namespace_policies import Policies
from magnetar.broker.policies.offload import (
    OffloadPolicies,
    broker_level,
    merge,
    namespace_level,
    settings_of,
)
from magnetar.broker.policies.persistence import PersistencePolicies
from magnetar.broker.policies.rates import dispatch_rate_of, publish_rate_of, subscribe_rate_of
from magnetar.broker.policies.retention import RetentionPolicies
from magnetar.broker.policies.topic_policies import TopicPolicies
from magnetar.broker.rate_limit import (
    NO_DISPATCH_LIMIT,
    NO_LIMIT,
    NO_SUBSCRIBE_LIMIT,
    DispatchRate,
    PublishRate,
    SubscribeRate,
)
from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.config import BacklogQuotaPolicy as MlQuotaPolicy
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.offload.settings import NO_OFFLOAD, OffloadSettings, ReadPriority


@frozen_struct(kw_only=False)
class BrokerDefaults:
    """The broker-wide settings policies override (Pulsar's ``broker.conf`` names in docs)."""

    retention_time_minutes: int = 0  # defaultRetentionTimeInMinutes
    retention_size_mb: int = 0  # defaultRetentionSizeInMB
    message_ttl_s: int = 0  # ttlDurationDefaultInSeconds (0 = none)
    backlog_quota_size_bytes: int = -1  # backlogQuotaDefaultLimitBytes
    backlog_quota_time_s: int = -1  # backlogQuotaDefaultLimitSecond
    backlog_quota_policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD
    deduplication_enabled: bool = False  # brokerDeduplicationEnabled
    ensemble_size: int = 1  # managedLedgerDefaultEnsembleSize
    write_quorum: int = 1
    ack_quorum: int = 1
    max_producers_per_topic: int = 0  # 0 = unlimited
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    allow_auto_topic_creation: bool = True
    auto_topic_partitions: int = 0  # 0 = non-partitioned
    cluster_name: str = "standalone"  # the key of per-cluster policies (publishMaxMessageRate)
    inactive_topic: InactiveTopicPolicies = DEFAULT_INACTIVE_TOPIC_POLICIES  # brokerDeleteInactive…
    offload: OffloadPolicies = field(default_factory=OffloadPolicies)  # managedLedgerOffload*


@frozen_struct(kw_only=False)
class EffectivePolicies:
    """What applies to one topic right now, in the broker's units. Limits of 0 (counts) or
    -1 (sizes, times) mean "unlimited"."""

    retention_time_ms: int
    retention_size_bytes: int
    message_ttl_ms: int
    backlog_quota_size_bytes: int
    backlog_quota_time_ms: int
    backlog_quota_policy: BacklogQuotaPolicy
    deduplication_enabled: bool
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    max_producers_per_topic: int
    max_consumers_per_topic: int
    max_consumers_per_subscription: int
    max_unacked_messages_per_consumer: int
    max_unacked_messages_per_subscription: int
    allow_auto_topic_creation: bool
    auto_topic_partitions: int
    inactive_topic: InactiveTopicPolicies = DEFAULT_INACTIVE_TOPIC_POLICIES
    """Topic ``inactiveTopicPolicies``, else the namespace's ``inactive_topic_policies``,
    else the broker's ``brokerDeleteInactiveTopics*`` (one object, not per field)."""
    publish_rate: PublishRate = NO_LIMIT
    """Topic ``publishRate``, else the namespace's ``publishMaxMessageRate`` for this
    cluster (:func:`publish_rate_of`)."""
    producer_publish_rate: PublishRate = NO_LIMIT
    """Each producer of the topic: topic ``publishRatePerProducer``, else the namespace's
    ``publishRatePerProducer`` for this cluster."""
    namespace_publish_rate: PublishRate = NO_LIMIT
    """All topics of the namespace on this broker together: the namespace's
    ``namespacePublishRate`` for this cluster."""
    namespace_storage_quota: NamespaceStorageQuota | None = None
    """The namespace's ``namespaceStorageQuota`` (None: none)."""
    dispatch_rate: DispatchRate = NO_DISPATCH_LIMIT
    """All subscriptions of the topic together: topic ``dispatchRate``, else the
    namespace's ``topicDispatchRate`` for this cluster (:func:`dispatch_rate_of`)."""
    subscription_dispatch_rate: DispatchRate = NO_DISPATCH_LIMIT
    """Each subscription of the topic: topic ``subscriptionDispatchRate``, else the
    namespace's ``subscriptionDispatchRate`` for this cluster."""
    subscribe_rate: SubscribeRate = NO_SUBSCRIBE_LIMIT
    """SUBSCRIBEs per client address: topic ``subscribeRate``, else the namespace's
    ``clusterSubscribeRate`` for this cluster (:func:`subscribe_rate_of`)."""
    offload: OffloadSettings = NO_OFFLOAD
    """Topic ``offloadPolicies``, else the namespace's ``offload_policies`` and
    ``offload_threshold``/``offload_threshold_in_seconds``/``offload_deletion_lag_ms``, else
    the broker's ``--offload-*`` flags (``managedLedgerOffload*`` in broker.conf)."""


def _per_cluster(ns: Policies, key: str, cluster: str) -> Any:
    """A namespace policy stored per cluster (``{cluster: value}``), this cluster's."""
    values = ns.extra.get(key)
    return values.get(cluster) if isinstance(values, dict) else None


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _minutes_ms(minutes: int) -> int:
    return -1 if minutes < 0 else minutes * 60_000


def _mb_bytes(mb: int) -> int:
    return -1 if mb < 0 else mb * 1024 * 1024


def resolve(
    defaults: BrokerDefaults, namespace: Policies | None, topic: TopicPolicies | None = None
) -> EffectivePolicies:
    """Topic level, else namespace level, else broker default, per setting."""
    ns = namespace or Policies()
    tp = topic or TopicPolicies()
    retention = _first(tp.retentionPolicies, ns.retention_policies) or RetentionPolicies(
        defaults.retention_time_minutes, defaults.retention_size_mb
    )
    ttl_s = _first(tp.messageTTLInSeconds, ns.message_ttl_in_seconds, defaults.message_ttl_s)
    quotas = tp.backLogQuotaMap or ns.backlog_quota_map
    size_quota = quotas.get(BacklogQuotaType.DESTINATION_STORAGE)
    time_quota = quotas.get(BacklogQuotaType.MESSAGE_AGE)
    quota_size = defaults.backlog_quota_size_bytes
    quota_time_s = defaults.backlog_quota_time_s
    policy = defaults.backlog_quota_policy
    if size_quota is not None:
        quota_size, policy = size_quota.limit_size_bytes, size_quota.policy
        if size_quota.limit_time_s >= 0:
            quota_time_s = size_quota.limit_time_s
    if time_quota is not None:
        quota_time_s = time_quota.limit_time_s
        if size_quota is None:
            policy = time_quota.policy
    persistence = _first(tp.persistence, ns.persistence) or PersistencePolicies(
        defaults.ensemble_size, defaults.write_quorum, defaults.ack_quorum
    )
    auto = ns.autoTopicCreationOverride
    ns_rates = ns.extra.get("publishMaxMessageRate")
    publish_rate = _first(
        publish_rate_of(tp.extra.get("publishRate")),
        publish_rate_of(ns_rates.get(defaults.cluster_name))
        if isinstance(ns_rates, dict)
        else None,
        NO_LIMIT,
    )
    cluster = defaults.cluster_name
    return EffectivePolicies(
        offload=offload_settings(defaults, ns, tp),
        inactive_topic=_first(
            tp.inactiveTopicPolicies, ns.inactive_topic_policies, defaults.inactive_topic
        ),
        publish_rate=publish_rate,
        producer_publish_rate=_first(
            publish_rate_of(tp.extra.get("publishRatePerProducer")),
            publish_rate_of(_per_cluster(ns, "publishRatePerProducer", cluster)),
            NO_LIMIT,
        ),
        namespace_publish_rate=_first(
            publish_rate_of(_per_cluster(ns, "namespacePublishRate", cluster)), NO_LIMIT
        ),
        namespace_storage_quota=namespace_storage_quota_of(
            ns.extra.get(NAMESPACE_STORAGE_QUOTA_KEY)
        ),
        dispatch_rate=_first(
            dispatch_rate_of(tp.extra.get("dispatchRate")),
            dispatch_rate_of(_per_cluster(ns, "topicDispatchRate", cluster)),
            NO_DISPATCH_LIMIT,
        ),
        subscription_dispatch_rate=_first(
            dispatch_rate_of(tp.extra.get("subscriptionDispatchRate")),
            dispatch_rate_of(_per_cluster(ns, "subscriptionDispatchRate", cluster)),
            NO_DISPATCH_LIMIT,
        ),
        subscribe_rate=_first(
            subscribe_rate_of(tp.extra.get("subscribeRate")),
            subscribe_rate_of(_per_cluster(ns, "clusterSubscribeRate", cluster)),
            NO_SUBSCRIBE_LIMIT,
        ),
        retention_time_ms=_minutes_ms(retention.retention_time_minutes),
        retention_size_bytes=_mb_bytes(retention.retention_size_mb),
        message_ttl_ms=ttl_s * 1000 if ttl_s > 0 else -1,
        backlog_quota_size_bytes=quota_size if quota_size > 0 else -1,
        backlog_quota_time_ms=quota_time_s * 1000 if quota_time_s > 0 else -1,
        backlog_quota_policy=policy,
        deduplication_enabled=bool(
            _first(tp.deduplicationEnabled, ns.deduplicationEnabled, defaults.deduplication_enabled)
        ),
        ensemble_size=persistence.ensemble_size,
        write_quorum=persistence.write_quorum,
        ack_quorum=persistence.ack_quorum,
        max_producers_per_topic=_first(
            tp.maxProducerPerTopic, ns.max_producers_per_topic, defaults.max_producers_per_topic
        ),
        max_consumers_per_topic=_first(
            tp.maxConsumerPerTopic, ns.max_consumers_per_topic, defaults.max_consumers_per_topic
        ),
        max_consumers_per_subscription=_first(
            tp.maxConsumersPerSubscription,
            ns.max_consumers_per_subscription,
            defaults.max_consumers_per_subscription,
        ),
        max_unacked_messages_per_consumer=_first(
            tp.maxUnackedMessagesOnConsumer,
            ns.max_unacked_messages_per_consumer,
            defaults.max_unacked_messages_per_consumer,
        ),
        max_unacked_messages_per_subscription=_first(
            tp.maxUnackedMessagesOnSubscription,
            ns.max_unacked_messages_per_subscription,
            defaults.max_unacked_messages_per_subscription,
        ),
        allow_auto_topic_creation=defaults.allow_auto_topic_creation
        if auto is None
        else auto.allow_auto_topic_creation,
        auto_topic_partitions=defaults.auto_topic_partitions
        if auto is None
        else (auto.default_num_partitions or 0 if auto.topic_type == "partitioned" else 0),
    )


def offload_policies(
    defaults: BrokerDefaults, namespace: Policies, topic: TopicPolicies
) -> OffloadPolicies:
    """The offload policies in force (``GET …/offloadPolicies?applied=true``): per field,
    the topic's, else the namespace's (its ``offload_policies``, then its single-value
    offload policies), else the broker's."""
    ns_level = namespace_level(
        namespace.offload_policies,
        namespace.offload_threshold,
        namespace.offload_threshold_in_seconds,
        namespace.offload_deletion_lag_ms,
    )
    return merge(topic.offloadPolicies, ns_level, defaults.offload)


def offload_settings(
    defaults: BrokerDefaults, namespace: Policies, topic: TopicPolicies
) -> OffloadSettings:
    """:func:`offload_policies` in the managed ledger's units."""
    return settings_of(offload_policies(defaults, namespace, topic))


def broker_defaults(config: BrokerConfig) -> BrokerDefaults:
    """The broker-level values namespace and topic policies override."""
    return BrokerDefaults(
        deduplication_enabled=config.deduplication_enabled,
        ensemble_size=config.ensemble_size,
        write_quorum=config.write_quorum,
        ack_quorum=config.ack_quorum,
        allow_auto_topic_creation=config.allow_auto_topic_creation,
        auto_topic_partitions=config.auto_topic_creation_partitions,
        cluster_name=config.cluster_name,
        max_unacked_messages_per_consumer=config.max_unacked_messages_per_consumer,
        max_unacked_messages_per_subscription=config.max_unacked_messages_per_subscription,
        offload=broker_level(
            config.offload_driver,
            bucket=config.offload_bucket,
            region=config.offload_region,
            endpoint=config.offload_endpoint,
            directory=config.offload_directory,
            threshold_bytes=config.offload_threshold_bytes,
            deletion_lag_ms=config.offload_deletion_lag_ms,
            read_priority=config.offload_read_priority,
        ),
        inactive_topic=InactiveTopicPolicies(
            delete_mode(config.delete_inactive_topics_mode),
            config.delete_inactive_topics_frequency_s
            if config.delete_inactive_topics_max_inactive_duration_s is None
            else config.delete_inactive_topics_max_inactive_duration_s,
            config.delete_inactive_topics_enabled,
        ),
    )


_last_ml_config: tuple[ManagedLedgerConfig, EffectivePolicies, ManagedLedgerConfig] | None = None
"""The last call of :func:`ml_config_for` (both inputs and the result are immutable)."""


def ml_config_for(base: ManagedLedgerConfig, policies: EffectivePolicies) -> ManagedLedgerConfig:
    """``base`` with the retention, TTL, backlog quota and offload triggers of ``policies``
    (no offload driver: no automatic offload). The topics of a namespace without overrides
    share one resolution of its policies, so a run of them opening gets the same (frozen)
    config object instead of a copy each."""
    global _last_ml_config
    last = _last_ml_config
    if last is not None and last[0] is base and last[1] is policies:
        return last[2]
    config = _ml_config_for(base, policies)
    _last_ml_config = (base, policies, config)
    return config


def _ml_config_for(base: ManagedLedgerConfig, policies: EffectivePolicies) -> ManagedLedgerConfig:
    evict = policies.backlog_quota_policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    offload = policies.offload
    configured = offload.driver is not None
    return dataclasses.replace(
        base,
        offload_threshold_bytes=offload.threshold_bytes if configured else -1,
        offload_threshold_ms=offload.threshold_ms if configured else -1,
        offload_deletion_lag_ms=offload.deletion_lag_ms,
        offload_read_bookkeeper_first=offload.read_priority is ReadPriority.BOOKKEEPER_FIRST,
        retention_time_ms=policies.retention_time_ms,
        retention_size_bytes=policies.retention_size_bytes,
        message_ttl_ms=policies.message_ttl_ms,
        backlog_quota_size_bytes=policies.backlog_quota_size_bytes,
        backlog_quota_time_ms=policies.backlog_quota_time_ms,
        backlog_quota_policy=MlQuotaPolicy.CONSUMER_BACKLOG_EVICTION
        if evict
        else MlQuotaPolicy.PRODUCER_EXCEPTION,
    )
