"""A namespace's policies: Pulsar's namespace ``Policies`` JSON (field names exactly as
Pulsar's ``Policies.java``). Every field not modelled is kept in ``extra``, so a value written
by the admin API round-trips unchanged; ``None`` means "not set here"."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Self

from magnetar.broker.policies.auto_topic_creation import AutoTopicCreationOverride
from magnetar.broker.policies.backlog_quota import (
    BacklogQuota,
    BacklogQuotaType,
    quota_map,
    quota_map_json,
)
from magnetar.broker.policies.inactive_topic import InactiveTopicPolicies
from magnetar.broker.policies.json_fields import (
    PolicyError,
    json_bytes,
    json_object,
    json_value,
    opt_bool,
    opt_int,
)
from magnetar.broker.policies.offload import OffloadPolicies
from magnetar.broker.policies.persistence import PersistencePolicies
from magnetar.broker.policies.retention import RetentionPolicies
from magnetar.common.frozen_struct import frozen_struct


@frozen_struct(kw_only=False)
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
    inactive_topic_policies: InactiveTopicPolicies | None = None
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
    offload_threshold: int = -1
    """Bytes on the bookies above which a topic's closed ledgers are offloaded (-1: unset)."""
    offload_threshold_in_seconds: int = -1
    """Age above which a closed ledger is offloaded (-1: unset)."""
    offload_deletion_lag_ms: int | None = None
    """How long a bookie copy outlives its offload (None: the broker's default)."""
    offload_policies: OffloadPolicies | None = None
    """Pulsar's ``OffloadPolicies`` (driver, bucket, thresholds, ...; see
    :mod:`.offload`)."""
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
                "backlog_quota_map": quota_map_json(self.backlog_quota_map),
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
                "inactive_topic_policies": None
                if self.inactive_topic_policies is None
                else self.inactive_topic_policies.to_json(),
                "schema_compatibility_strategy": self.schema_compatibility_strategy,
                "is_allow_auto_update_schema": self.is_allow_auto_update_schema,
                "schema_validation_enforced": self.schema_validation_enforced,
                "offload_threshold": self.offload_threshold,
                "offload_threshold_in_seconds": self.offload_threshold_in_seconds,
                "offload_deletion_lag_ms": self.offload_deletion_lag_ms,
                "offload_policies": None
                if self.offload_policies is None
                else self.offload_policies.to_json(),
            }
        )
        return body

    def encode(self) -> bytes:
        return json_bytes(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> Policies:
        """Raises :class:`PolicyError` for a malformed value."""
        body = dict(json_object(value, "namespace policies"))
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        retention = body.get("retention_policies")
        persistence = body.get("persistence")
        auto = body.get("autoTopicCreationOverride")
        inactive = body.get("inactive_topic_policies")
        offload = body.get("offload_policies")
        clusters = body.get("replication_clusters") or []
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise PolicyError("replication_clusters must be a list of names")
        return cls(
            retention_policies=None
            if retention is None
            else RetentionPolicies.from_json(retention),
            message_ttl_in_seconds=opt_int(body, "message_ttl_in_seconds"),
            backlog_quota_map=quota_map(body.get("backlog_quota_map")),
            deduplicationEnabled=opt_bool(body, "deduplicationEnabled"),
            persistence=None if persistence is None else PersistencePolicies.from_json(persistence),
            max_producers_per_topic=opt_int(body, "max_producers_per_topic"),
            max_consumers_per_topic=opt_int(body, "max_consumers_per_topic"),
            max_consumers_per_subscription=opt_int(body, "max_consumers_per_subscription"),
            max_unacked_messages_per_consumer=opt_int(body, "max_unacked_messages_per_consumer"),
            max_unacked_messages_per_subscription=opt_int(
                body, "max_unacked_messages_per_subscription"
            ),
            max_subscriptions_per_topic=opt_int(body, "max_subscriptions_per_topic"),
            autoTopicCreationOverride=None
            if auto is None
            else AutoTopicCreationOverride.from_json(auto),
            inactive_topic_policies=None
            if inactive is None
            else InactiveTopicPolicies.from_json(inactive),
            schema_compatibility_strategy=str(
                body.get("schema_compatibility_strategy") or "UNDEFINED"
            ),
            is_allow_auto_update_schema=opt_bool(body, "is_allow_auto_update_schema"),
            schema_validation_enforced=opt_bool(body, "schema_validation_enforced"),
            auth_policies=json_object(
                body.get("auth_policies") or cls().auth_policies, "auth_policies"
            ),
            replication_clusters=tuple(sorted(clusters)),
            offload_threshold=_int_or(body, "offload_threshold", -1),
            offload_threshold_in_seconds=_int_or(body, "offload_threshold_in_seconds", -1),
            offload_deletion_lag_ms=opt_int(body, "offload_deletion_lag_ms"),
            offload_policies=None if offload is None else OffloadPolicies.from_json(offload),
            extra={k: v for k, v in body.items() if k not in known},
        )

    @classmethod
    def decode(cls, data: bytes) -> Policies:
        return cls.from_json(json_value(data, "namespace policies"))


def _int_or(body: dict[str, Any], key: str, default: int) -> int:
    value = opt_int(body, key)
    return default if value is None else value
