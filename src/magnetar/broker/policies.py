"""Namespace and topic policies: the model, its storage, and the effective view per topic.

**Model.** :class:`Policies` is Pulsar's namespace ``Policies`` JSON (field names exactly as
Pulsar's ``Policies.java``: ``retention_policies``, ``message_ttl_in_seconds``,
``backlog_quota_map``, ``deduplicationEnabled``, ``persistence``, ``max_producers_per_topic``,
``autoTopicCreationOverride``, ``schema_compatibility_strategy``, ``auth_policies``,
``replication_clusters``, ...). :class:`TopicPolicies` is Pulsar's ``TopicPolicies`` JSON
(``retentionPolicies``, ``messageTTLInSeconds``, ``backLogQuotaMap``, ``maxProducerPerTopic``,
...). Both keep every field they do not model in ``extra``, so a value written by the admin
API round-trips unchanged. ``None`` means "not set here" (fall back to the next level).

**Storage** (:class:`PolicyStore`): namespace policies at ``/admin/policies/<tenant>/<ns>``
(the existing layout; the tenant node ``/admin/policies/<tenant>`` holds the tenant info),
topic policies at ``/admin/topic-policies/<tenant>/<ns>/<domain>/<quoted local name>``.
Updates are read-modify-write with compare-and-set, retried on a version conflict.

**Resolution** (:func:`resolve`): topic level, else namespace level, else the broker's
defaults (:class:`BrokerDefaults`, from ``BrokerConfig``), giving an :class:`EffectivePolicies`
with plain numbers in the units the broker and managed ledger use.

**Live view** (:class:`PolicyCache`): reads through a
:class:`~magnetar.metadata.cache.MetadataCache` and follows the store's notifications under
both roots; after a change it reads the changed node directly from the store (so it never
acts on a value the cache has not yet dropped) and calls every listener with the affected
namespace (and topic, for topic policies). The broker re-resolves its loaded topics there,
so a change takes effect on live topics without a restart.

Admin usage::

    policies = PolicyStore(store)
    await policies.update_namespace(ns, lambda p: p.with_(message_ttl_in_seconds=60))
    await policies.update_topic(topic, lambda p: p.with_(maxProducerPerTopic=1))
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import quote, unquote

from magnetar.auth.rate_limit import (
    NO_DISPATCH_LIMIT,
    NO_LIMIT,
    NO_SUBSCRIBE_LIMIT,
    DispatchRate,
    PublishRate,
    SubscribeRate,
)
from magnetar.broker.config import BrokerConfig
from magnetar.broker.dynamic_config import DynamicConfigFollower, overridden
from magnetar.common.errors import MagnetarError, MetadataError
from magnetar.common.names import NamespaceName, TopicName
from magnetar.managed_ledger.config import BacklogQuotaPolicy as MlQuotaPolicy
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.metadata.cache import MetadataCache
from magnetar.metadata.notifications import StreamOverflow
from magnetar.metadata.store import (
    MUST_NOT_EXIST,
    BadVersion,
    MetadataStore,
    NodeExists,
    NotFound,
)

log = logging.getLogger(__name__)

NAMESPACE_POLICIES_ROOT = "/admin/policies"
TOPIC_POLICIES_ROOT = "/admin/topic-policies"
UPDATE_RETRIES_MAX = 20


class PolicyError(MetadataError):
    """A stored policy value that is not valid JSON of the expected shape."""


# --- value types (Pulsar's nested policy objects) ------------------------------------------


class BacklogQuotaPolicy(enum.StrEnum):
    """Pulsar's ``BacklogQuota.RetentionPolicy``."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    """New producers fail with ProducerBlockedQuotaExceededError (the client retries)."""
    PRODUCER_EXCEPTION = "producer_exception"
    """New producers fail with ProducerBlockedQuotaExceededException; sends fail too."""
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
    """The slowest subscriptions lose their oldest messages until the backlog fits."""


class BacklogQuotaType(enum.StrEnum):
    """Keys of ``backlog_quota_map``."""

    DESTINATION_STORAGE = "destination_storage"
    MESSAGE_AGE = "message_age"


@dataclass(frozen=True, slots=True)
class RetentionPolicies:
    """``{"retentionTimeInMinutes": int, "retentionSizeInMB": int}``; -1 = infinite."""

    retention_time_minutes: int = 0
    retention_size_mb: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "retentionTimeInMinutes": self.retention_time_minutes,
            "retentionSizeInMB": self.retention_size_mb,
        }

    @classmethod
    def from_json(cls, value: Any) -> RetentionPolicies:
        body = _object(value, "retention policies")
        return cls(
            _int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes"),
            _int(body.get("retentionSizeInMB", 0), "retentionSizeInMB"),
        )


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """``{"limitSize": bytes, "limitTime": seconds, "policy": ...}``; -1 = no limit.
    (``limit`` is the deprecated alias of ``limitSize``.)"""

    limit_size_bytes: int = -1
    limit_time_s: int = -1
    policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_REQUEST_HOLD

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit_size_bytes,
            "limitSize": self.limit_size_bytes,
            "limitTime": self.limit_time_s,
            "policy": self.policy.value,
        }

    @classmethod
    def from_json(cls, value: Any) -> BacklogQuota:
        body = _object(value, "backlog quota")
        size = body.get("limitSize", body.get("limit", -1))
        try:
            policy = BacklogQuotaPolicy(body.get("policy") or "producer_request_hold")
        except ValueError as exc:
            raise PolicyError(f"unknown backlog quota policy {body.get('policy')!r}") from exc
        return cls(_int(size, "limitSize"), _int(body.get("limitTime", -1), "limitTime"), policy)


@dataclass(frozen=True, slots=True)
class PersistencePolicies:
    """``{"bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum",
    "managedLedgerMaxMarkDeleteRate"}``; applies to ledgers created after it is set."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    max_mark_delete_rate: float = 0.0

    def __post_init__(self) -> None:
        if not (1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size):
            raise PolicyError(
                "persistence needs 1 <= ackQuorum <= writeQuorum <= ensemble, got "
                f"E={self.ensemble_size} Qw={self.write_quorum} Qa={self.ack_quorum}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "bookkeeperEnsemble": self.ensemble_size,
            "bookkeeperWriteQuorum": self.write_quorum,
            "bookkeeperAckQuorum": self.ack_quorum,
            "managedLedgerMaxMarkDeleteRate": self.max_mark_delete_rate,
        }

    @classmethod
    def from_json(cls, value: Any) -> PersistencePolicies:
        body = _object(value, "persistence policies")
        rate = body.get("managedLedgerMaxMarkDeleteRate", 0.0)
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            raise PolicyError("managedLedgerMaxMarkDeleteRate must be a number")
        return cls(
            _int(body.get("bookkeeperEnsemble"), "bookkeeperEnsemble"),
            _int(body.get("bookkeeperWriteQuorum"), "bookkeeperWriteQuorum"),
            _int(body.get("bookkeeperAckQuorum"), "bookkeeperAckQuorum"),
            float(rate),
        )


@dataclass(frozen=True, slots=True)
class AutoTopicCreationOverride:
    """``{"allowAutoTopicCreation": bool, "topicType": "non-partitioned"|"partitioned",
    "defaultNumPartitions": int}``."""

    allow_auto_topic_creation: bool
    topic_type: str = "non-partitioned"
    default_num_partitions: int | None = None

    def __post_init__(self) -> None:
        if self.topic_type not in ("non-partitioned", "partitioned"):
            raise PolicyError(
                f"topicType must be non-partitioned or partitioned: {self.topic_type!r}"
            )
        if self.topic_type == "partitioned" and (
            self.default_num_partitions is None or self.default_num_partitions < 1
        ):
            raise PolicyError("a partitioned topicType needs defaultNumPartitions >= 1")

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "allowAutoTopicCreation": self.allow_auto_topic_creation,
            "topicType": self.topic_type,
        }
        if self.default_num_partitions is not None:
            body["defaultNumPartitions"] = self.default_num_partitions
        return body

    @classmethod
    def from_json(cls, value: Any) -> AutoTopicCreationOverride:
        body = _object(value, "autoTopicCreationOverride")
        allow = body.get("allowAutoTopicCreation")
        if not isinstance(allow, bool):
            raise PolicyError("allowAutoTopicCreation must be true or false")
        partitions = body.get("defaultNumPartitions")
        return cls(
            allow,
            str(body.get("topicType") or "non-partitioned"),
            None if partitions is None else _int(partitions, "defaultNumPartitions"),
        )


# --- namespace and topic policies ----------------------------------------------------------


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PolicyError(f"{what} must be a JSON object")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"{what} must be an integer, got {value!r}")
    return value


def _opt_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    return None if value is None else _int(value, key)


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PolicyError(f"{key} must be a string")
    return value


def _opt_bool(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise PolicyError(f"{key} must be true or false")
    return value


def _quota_map(value: Any) -> dict[BacklogQuotaType, BacklogQuota]:
    result: dict[BacklogQuotaType, BacklogQuota] = {}
    for key, quota in _object(value or {}, "backlog quota map").items():
        try:
            kind = BacklogQuotaType(key)
        except ValueError as exc:
            raise PolicyError(f"unknown backlog quota type {key!r}") from exc
        result[kind] = BacklogQuota.from_json(quota)
    return result


def _quota_map_json(quotas: dict[BacklogQuotaType, BacklogQuota]) -> dict[str, Any]:
    return {kind.value: quota.to_json() for kind, quota in sorted(quotas.items())}


@dataclass(frozen=True, slots=True)
class Policies:
    """One namespace's policies. Attribute names are Pulsar's JSON names."""

    retention_policies: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = None
    backlog_quota_map: dict[BacklogQuotaType, BacklogQuota] = field(default_factory=dict)
    deduplicationEnabled: bool | None = None
    persistence: PersistencePolicies | None = None
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_consumers_per_subscription: int | None = None
    max_unacked_messages_per_consumer: int | None = None
    max_unacked_messages_per_subscription: int | None = None
    max_subscriptions_per_topic: int | None = None
    autoTopicCreationOverride: AutoTopicCreationOverride | None = None
    schema_compatibility_strategy: str = "UNDEFINED"
    is_allow_auto_update_schema: bool | None = None
    """May producers and consumers add schema versions (None: the broker default, true)."""
    schema_validation_enforced: bool | None = None
    """Refuse producers without a schema on a topic with one (None: false)."""
    auth_policies: dict[str, Any] = field(
        default_factory=lambda: {
            "namespace_auth": {},
            "destination_auth": {},
            "subscription_auth_roles": {},
        }
    )
    replication_clusters: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    """Every other JSON field, kept as stored (bundles, dispatch rates, properties, ...)."""

    def with_(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (``None`` clears a setting)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        body = dict(self.extra)
        body.update(
            {
                "auth_policies": self.auth_policies,
                "replication_clusters": list(self.replication_clusters),
                "backlog_quota_map": _quota_map_json(self.backlog_quota_map),
                "retention_policies": None
                if self.retention_policies is None
                else self.retention_policies.to_json(),
                "message_ttl_in_seconds": self.message_ttl_in_seconds,
                "deduplicationEnabled": self.deduplicationEnabled,
                "persistence": None if self.persistence is None else self.persistence.to_json(),
                "max_producers_per_topic": self.max_producers_per_topic,
                "max_consumers_per_topic": self.max_consumers_per_topic,
                "max_consumers_per_subscription": self.max_consumers_per_subscription,
                "max_unacked_messages_per_consumer": self.max_unacked_messages_per_consumer,
                "max_unacked_messages_per_subscription": self.max_unacked_messages_per_subscription,
                "max_subscriptions_per_topic": self.max_subscriptions_per_topic,
                "autoTopicCreationOverride": None
                if self.autoTopicCreationOverride is None
                else self.autoTopicCreationOverride.to_json(),
                "schema_compatibility_strategy": self.schema_compatibility_strategy,
                "is_allow_auto_update_schema": self.is_allow_auto_update_schema,
                "schema_validation_enforced": self.schema_validation_enforced,
            }
        )
        return body

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: Any) -> Policies:
        """Raises :class:`PolicyError` for a malformed value."""
        body = dict(_object(value, "namespace policies"))
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        retention = body.get("retention_policies")
        persistence = body.get("persistence")
        auto = body.get("autoTopicCreationOverride")
        clusters = body.get("replication_clusters") or []
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise PolicyError("replication_clusters must be a list of names")
        return cls(
            retention_policies=None
            if retention is None
            else RetentionPolicies.from_json(retention),
            message_ttl_in_seconds=_opt_int(body, "message_ttl_in_seconds"),
            backlog_quota_map=_quota_map(body.get("backlog_quota_map")),
            deduplicationEnabled=_opt_bool(body, "deduplicationEnabled"),
            persistence=None if persistence is None else PersistencePolicies.from_json(persistence),
            max_producers_per_topic=_opt_int(body, "max_producers_per_topic"),
            max_consumers_per_topic=_opt_int(body, "max_consumers_per_topic"),
            max_consumers_per_subscription=_opt_int(body, "max_consumers_per_subscription"),
            max_unacked_messages_per_consumer=_opt_int(body, "max_unacked_messages_per_consumer"),
            max_unacked_messages_per_subscription=_opt_int(
                body, "max_unacked_messages_per_subscription"
            ),
            max_subscriptions_per_topic=_opt_int(body, "max_subscriptions_per_topic"),
            autoTopicCreationOverride=None
            if auto is None
            else AutoTopicCreationOverride.from_json(auto),
            schema_compatibility_strategy=str(
                body.get("schema_compatibility_strategy") or "UNDEFINED"
            ),
            is_allow_auto_update_schema=_opt_bool(body, "is_allow_auto_update_schema"),
            schema_validation_enforced=_opt_bool(body, "schema_validation_enforced"),
            auth_policies=_object(
                body.get("auth_policies") or cls().auth_policies, "auth_policies"
            ),
            replication_clusters=tuple(sorted(clusters)),
            extra={k: v for k, v in body.items() if k not in known},
        )

    @classmethod
    def decode(cls, data: bytes) -> Policies:
        try:
            value = json.loads(data) if data.strip() else {}
        except ValueError as exc:
            raise PolicyError(f"namespace policies are not JSON: {exc}") from exc
        return cls.from_json(value)


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """One topic's overrides. Attribute names are Pulsar's ``TopicPolicies`` JSON names."""

    retentionPolicies: RetentionPolicies | None = None
    messageTTLInSeconds: int | None = None
    backLogQuotaMap: dict[BacklogQuotaType, BacklogQuota] = field(default_factory=dict)
    deduplicationEnabled: bool | None = None
    persistence: PersistencePolicies | None = None
    maxProducerPerTopic: int | None = None
    maxConsumerPerTopic: int | None = None
    maxConsumersPerSubscription: int | None = None
    maxUnackedMessagesOnConsumer: int | None = None
    maxUnackedMessagesOnSubscription: int | None = None
    maxSubscriptionsPerTopic: int | None = None
    schemaCompatibilityStrategy: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def is_empty(self) -> bool:
        return self == TopicPolicies()

    def to_json(self) -> dict[str, Any]:
        body = dict(self.extra)
        body["backLogQuotaMap"] = _quota_map_json(self.backLogQuotaMap)
        for f in dataclasses.fields(self):
            if f.name in ("extra", "backLogQuotaMap"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                body[f.name] = value.to_json() if hasattr(value, "to_json") else value
        return body

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: Any) -> TopicPolicies:
        body = dict(_object(value, "topic policies"))
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        retention = body.get("retentionPolicies")
        persistence = body.get("persistence")
        return cls(
            retentionPolicies=None if retention is None else RetentionPolicies.from_json(retention),
            messageTTLInSeconds=_opt_int(body, "messageTTLInSeconds"),
            backLogQuotaMap=_quota_map(body.get("backLogQuotaMap")),
            deduplicationEnabled=_opt_bool(body, "deduplicationEnabled"),
            persistence=None if persistence is None else PersistencePolicies.from_json(persistence),
            maxProducerPerTopic=_opt_int(body, "maxProducerPerTopic"),
            maxConsumerPerTopic=_opt_int(body, "maxConsumerPerTopic"),
            maxConsumersPerSubscription=_opt_int(body, "maxConsumersPerSubscription"),
            maxUnackedMessagesOnConsumer=_opt_int(body, "maxUnackedMessagesOnConsumer"),
            maxUnackedMessagesOnSubscription=_opt_int(body, "maxUnackedMessagesOnSubscription"),
            maxSubscriptionsPerTopic=_opt_int(body, "maxSubscriptionsPerTopic"),
            schemaCompatibilityStrategy=_opt_str(body, "schemaCompatibilityStrategy"),
            extra={k: v for k, v in body.items() if k not in known},
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicPolicies:
        try:
            value = json.loads(data) if data.strip() else {}
        except ValueError as exc:
            raise PolicyError(f"topic policies are not JSON: {exc}") from exc
        return cls.from_json(value)


# --- effective policies --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


NAMESPACE_STORAGE_QUOTA_KEY = "namespaceStorageQuota"
"""Where a namespace's storage quota in all is stored in its policies
(``magnetar.admin.storage_quota``)."""


@dataclass(frozen=True, slots=True)
class NamespaceStorageQuota:
    """The sum of the backlogs of a namespace's topics on a broker may not pass
    ``limit_size_bytes``; over it new producers are held or refused per ``policy``."""

    limit_size_bytes: int
    policy: BacklogQuotaPolicy


def namespace_storage_quota_of(value: Any) -> NamespaceStorageQuota | None:
    """``{"limitSize": N, "policy": "..."}``; None when absent or malformed (no quota)."""
    if not isinstance(value, dict):
        return None
    limit, policy = value.get("limitSize"), value.get("policy")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        return None
    if not isinstance(policy, str):
        return None
    try:
        kind = BacklogQuotaPolicy(policy)
    except ValueError:
        return None
    if kind is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION:
        return None
    return NamespaceStorageQuota(limit, kind)


def publish_rate_of(value: Any) -> PublishRate | None:
    """Pulsar's ``PublishRate`` JSON (``publishThrottlingRateInMsg``,
    ``publishThrottlingRateInByte``); None when absent or malformed (no limit)."""
    if not isinstance(value, dict):
        return None
    msgs, size = (
        value.get("publishThrottlingRateInMsg", 0),
        value.get("publishThrottlingRateInByte", 0),
    )
    if not isinstance(msgs, int) or not isinstance(size, int):
        return None
    return PublishRate(msgs_per_s=msgs, bytes_per_s=size)


def dispatch_rate_of(value: Any) -> DispatchRate | None:
    """Pulsar's ``DispatchRate`` JSON (``dispatchThrottlingRateInMsg``,
    ``dispatchThrottlingRateInByte``, ``ratePeriodInSecond``, ``relativeToPublishRate``);
    None when absent or malformed (no limit)."""
    if not isinstance(value, dict):
        return None
    msgs = value.get("dispatchThrottlingRateInMsg", 0)
    size = value.get("dispatchThrottlingRateInByte", 0)
    period = value.get("ratePeriodInSecond", 1)
    relative = value.get("relativeToPublishRate", False)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (msgs, size, period)):
        return None
    return DispatchRate(
        msgs=msgs,
        size_bytes=size,
        period_s=max(1, period),
        relative_to_publish_rate=relative is True,
    )


def subscribe_rate_of(value: Any) -> SubscribeRate | None:
    """Pulsar's ``SubscribeRate`` JSON (``subscribeThrottlingRatePerConsumer``,
    ``ratePeriodInSecond``, 30 by default); None when absent or malformed (no limit)."""
    if not isinstance(value, dict):
        return None
    per_consumer = value.get("subscribeThrottlingRatePerConsumer", 0)
    period = value.get("ratePeriodInSecond", 30)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (per_consumer, period)):
        return None
    return SubscribeRate(per_consumer=per_consumer, period_s=max(1, period))


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
    )


def ml_config_for(base: ManagedLedgerConfig, policies: EffectivePolicies) -> ManagedLedgerConfig:
    """``base`` with the retention, TTL and backlog quota of ``policies``."""
    evict = policies.backlog_quota_policy is BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION
    return dataclasses.replace(
        base,
        retention_time_ms=policies.retention_time_ms,
        retention_size_bytes=policies.retention_size_bytes,
        message_ttl_ms=policies.message_ttl_ms,
        backlog_quota_size_bytes=policies.backlog_quota_size_bytes,
        backlog_quota_time_ms=policies.backlog_quota_time_ms,
        backlog_quota_policy=MlQuotaPolicy.CONSUMER_BACKLOG_EVICTION
        if evict
        else MlQuotaPolicy.PRODUCER_EXCEPTION,
    )


# --- storage ------------------------------------------------------------------------------


def namespace_path(namespace: NamespaceName) -> str:
    return f"{NAMESPACE_POLICIES_ROOT}/{namespace.tenant}/{namespace.namespace}"


def topic_path(topic: TopicName) -> str:
    return (
        f"{TOPIC_POLICIES_ROOT}/{topic.tenant}/{topic.namespace}/{topic.domain.value}/"
        f"{quote(topic.local_name, safe='')}"
    )


def parse_policy_path(path: str) -> tuple[NamespaceName, TopicName | None] | None:
    """The namespace (and topic) a policy node belongs to, or ``None`` for other nodes
    (tenant nodes, intermediate nodes)."""
    parts = path.strip("/").split("/")
    with contextlib.suppress(ValueError, MagnetarError):
        if parts[:2] == ["admin", "policies"] and len(parts) == 4:
            return NamespaceName.of(parts[2], parts[3]), None
        if parts[:2] == ["admin", "topic-policies"] and len(parts) == 6:
            tenant, ns, domain, local = parts[2:]
            topic = TopicName.parse(f"{domain}://{tenant}/{ns}/{unquote(local)}")
            return topic.namespace_name, topic
    return None


class PolicyStore:
    """Reads and writes policies in the metadata store (no caching).

    ``on_written`` (the admin API's: :meth:`PolicyCache.written` of the broker it runs in)
    is awaited after each successful write, before the write returns: a REST answer then
    means that broker's loaded topics already apply the change (the store's notification
    reaches them, and every other broker, a moment later; until then a consumer subscribed
    right after a new dispatch rate could be sent its whole backlog unthrottled)."""

    def __init__(
        self,
        store: MetadataStore,
        on_written: Callable[[NamespaceName, TopicName | None], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._on_written = on_written

    async def _written(self, namespace: NamespaceName, topic: TopicName | None) -> None:
        if self._on_written is not None:
            await self._on_written(namespace, topic)

    async def get_namespace(self, namespace: NamespaceName) -> Policies | None:
        """``None`` when the namespace does not exist. Raises :class:`PolicyError`."""
        try:
            got = await self.store.get(namespace_path(namespace))
        except NotFound:
            return None
        return Policies.decode(got.value)

    async def create_namespace(self, namespace: NamespaceName, policies: Policies) -> None:
        """Raises ``NodeExists`` when the namespace exists."""
        await self.store.put(namespace_path(namespace), policies.encode(), MUST_NOT_EXIST)

    async def update_namespace(
        self, namespace: NamespaceName, change: Callable[[Policies], Policies]
    ) -> Policies:
        """Read-modify-write with compare-and-set (retried on conflict). Raises ``NotFound``
        when the namespace does not exist."""
        path = namespace_path(namespace)
        for _ in range(UPDATE_RETRIES_MAX):
            got = await self.store.get(path)
            new = change(Policies.decode(got.value))
            try:
                await self.store.put(path, new.encode(), got.stat.version)
            except BadVersion:
                continue
            await self._written(namespace, None)
            return new
        raise MetadataError(f"{path}: too many concurrent updates")

    async def get_topic(self, topic: TopicName) -> TopicPolicies | None:
        try:
            got = await self.store.get(topic_path(topic))
        except NotFound:
            return None
        return TopicPolicies.decode(got.value)

    async def update_topic(
        self, topic: TopicName, change: Callable[[TopicPolicies], TopicPolicies]
    ) -> TopicPolicies:
        """Read-modify-write of the topic's overrides (created when absent)."""
        path = topic_path(topic)
        for _ in range(UPDATE_RETRIES_MAX):
            try:
                got = await self.store.get(path)
                current, version = TopicPolicies.decode(got.value), got.stat.version
            except NotFound:
                current, version = TopicPolicies(), MUST_NOT_EXIST
            new = change(current)
            try:
                await self.store.put(path, new.encode(), version)
            except (BadVersion, NodeExists):
                continue
            await self._written(topic.namespace_name, topic)
            return new
        raise MetadataError(f"{path}: too many concurrent updates")

    async def delete_topic(self, topic: TopicName) -> None:
        """Forget a topic's overrides (no error when there are none)."""
        try:
            await self.store.delete(topic_path(topic))
        except NotFound:
            return
        await self._written(topic.namespace_name, topic)


PolicyListener = Callable[[NamespaceName | None, TopicName | None], Awaitable[None]]
"""``(namespace, topic)``: a namespace's policies changed (``topic`` None), or a topic's
overrides changed; ``(None, None)``: anything may have changed (notifications were lost)."""


class PolicyCache:
    """Cached policy reads plus change notifications. ``await start()``; ``await close()``."""

    def __init__(self, store: MetadataStore, defaults: BrokerDefaults) -> None:
        self.store = store
        self.configured_defaults = defaults
        """The broker's own settings; :attr:`defaults` adds the dynamic configuration."""
        self.defaults = defaults
        self._dynamic_config = DynamicConfigFollower(store, self._defaults_overridden)
        self.policy_store = PolicyStore(store)
        self._namespaces = MetadataCache(store, NAMESPACE_POLICIES_ROOT)
        self._topics = MetadataCache(store, TOPIC_POLICIES_ROOT)
        self._listeners: list[PolicyListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        # one change at a time, whether a notification or this process's own write told of
        # it: a slow fresh read for an earlier change never lands after a later one's
        self._notifying = asyncio.Lock()

    def add_listener(self, listener: PolicyListener) -> None:
        """``listener`` (see :data:`PolicyListener`) runs after each change, one at a time."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Follow the stored policies and the dynamic configuration (the broker defaults
        changed at run time, :mod:`magnetar.broker.dynamic_config`)."""
        await self._dynamic_config.start()
        for root, cache in (
            (NAMESPACE_POLICIES_ROOT, self._namespaces),
            (TOPIC_POLICIES_ROOT, self._topics),
        ):
            await cache.start()
            stream = self.store.notifications(root)
            await stream.wait_ready()
            self._tasks.append(
                asyncio.create_task(self._follow(root, stream), name=f"policies-{root}")
            )

    async def _defaults_overridden(self, values: dict[str, str]) -> None:
        defaults = overridden(self.configured_defaults, values)
        if defaults != self.defaults:
            self.defaults = defaults
            await self._notify(None, None)  # every loaded topic resolves its policies anew

    async def close(self) -> None:
        await self._dynamic_config.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._namespaces.close()
        await self._topics.close()

    async def _follow(self, root: str, stream: Any) -> None:
        while True:
            try:
                async for event in stream:
                    target = parse_policy_path(event.path)
                    if target is not None:
                        await self._notify(*target)
                return
            except StreamOverflow:
                log.warning("policy notifications under %s overflowed; refreshing all", root)
            finally:
                stream.close()
            stream = self.store.notifications(root)
            await stream.wait_ready()
            await self._notify(None, None)

    async def written(self, namespace: NamespaceName, topic: TopicName | None) -> None:
        """This process has just written ``namespace``'s policies (``topic`` None) or
        ``topic``'s overrides: drop the cached value and tell the listeners now, as the
        store's notification will again (listeners re-read fresh values, so twice is
        harmless). The :data:`PolicyListener` the admin API's :class:`PolicyStore` calls."""
        if topic is None:
            self._namespaces.invalidate(namespace_path(namespace))
        else:
            self._topics.invalidate(topic_path(topic))
        await self._notify(namespace, topic)

    async def _notify(self, namespace: NamespaceName | None, topic: TopicName | None) -> None:
        async with self._notifying:
            for listener in list(self._listeners):
                try:
                    await listener(namespace, topic)
                except Exception:
                    log.exception("policy listener failed for %s %s", namespace, topic)

    async def namespace(self, namespace: NamespaceName, *, fresh: bool = False) -> Policies | None:
        """The namespace's policies (``None`` if it does not exist). ``fresh`` bypasses the
        cache (use in listeners: the cache may not have seen the change yet)."""
        if fresh:
            return await self.policy_store.get_namespace(namespace)
        got = await self._namespaces.get(namespace_path(namespace))
        return None if got is None else Policies.decode(got.value)

    async def namespace_exists(self, namespace: NamespaceName) -> bool:
        """Whether the namespace exists. A cached "no" is confirmed by a fresh read, so a
        namespace created a moment ago (its notification still on the way) is not refused."""
        path = namespace_path(namespace)
        if await self._namespaces.get(path) is not None:
            return True
        return await self.store.exists(path) is not None

    async def topic(self, topic: TopicName, *, fresh: bool = False) -> TopicPolicies | None:
        if fresh:
            return await self.policy_store.get_topic(topic)
        got = await self._topics.get(topic_path(topic))
        return None if got is None else TopicPolicies.decode(got.value)

    async def effective(self, topic: TopicName, *, fresh: bool = False) -> EffectivePolicies:
        """Resolved policies of ``topic``. A malformed stored value is logged and ignored
        (the level falls back to the next one), so bad admin input never stops a topic."""
        base = topic.partitioned_topic if topic.partition_index >= 0 else topic
        ns: Policies | None = None
        tp: TopicPolicies | None = None
        try:
            ns = await self.namespace(topic.namespace_name, fresh=fresh)
        except PolicyError as exc:
            log.warning("ignoring namespace policies of %s: %s", topic.namespace_name, exc)
        try:
            tp = await self.topic(base, fresh=fresh)
            if tp is None and base is not topic:
                tp = await self.topic(topic, fresh=fresh)
        except PolicyError as exc:
            log.warning("ignoring topic policies of %s: %s", base, exc)
        return resolve(self.defaults, ns, tp)
