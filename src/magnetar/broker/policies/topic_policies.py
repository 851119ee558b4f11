"""A topic's overrides: Pulsar's ``TopicPolicies`` JSON (``retentionPolicies``,
``messageTTLInSeconds``, ``backLogQuotaMap``, ``maxProducerPerTopic``, ...). Every field not
modelled is kept in ``extra``; ``None`` means "not set here" (the namespace's value applies)."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Self

from magnetar.broker.policies.backlog_quota import (
    BacklogQuota,
    BacklogQuotaType,
    quota_map,
    quota_map_json,
)
from magnetar.broker.policies.inactive_topic import InactiveTopicPolicies
from magnetar.broker.policies.json_fields import (
    json_bytes,
    json_object,
    json_value,
    opt_bool,
    opt_int,
    opt_str,
)
from magnetar.broker.policies.offload import OffloadPolicies
from magnetar.broker.policies.persistence import PersistencePolicies
from magnetar.broker.policies.retention import RetentionPolicies
from magnetar.common.frozen_struct import frozen_struct


@frozen_struct(kw_only=False)
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
    inactiveTopicPolicies: InactiveTopicPolicies | None = None
    offloadPolicies: OffloadPolicies | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def is_empty(self) -> bool:
        return self == TopicPolicies()

    def to_json(self) -> dict[str, Any]:
        body = dict(self.extra)
        body["backLogQuotaMap"] = quota_map_json(self.backLogQuotaMap)
        for f in dataclasses.fields(self):
            if f.name in ("extra", "backLogQuotaMap"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                body[f.name] = value.to_json() if hasattr(value, "to_json") else value
        return body

    def encode(self) -> bytes:
        return json_bytes(self.to_json())

    @classmethod
    def from_json(cls, value: Any) -> TopicPolicies:
        body = dict(json_object(value, "topic policies"))
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        retention = body.get("retentionPolicies")
        persistence = body.get("persistence")
        inactive = body.get("inactiveTopicPolicies")
        offload = body.get("offloadPolicies")
        return cls(
            retentionPolicies=None if retention is None else RetentionPolicies.from_json(retention),
            messageTTLInSeconds=opt_int(body, "messageTTLInSeconds"),
            backLogQuotaMap=quota_map(body.get("backLogQuotaMap")),
            deduplicationEnabled=opt_bool(body, "deduplicationEnabled"),
            persistence=None if persistence is None else PersistencePolicies.from_json(persistence),
            maxProducerPerTopic=opt_int(body, "maxProducerPerTopic"),
            maxConsumerPerTopic=opt_int(body, "maxConsumerPerTopic"),
            maxConsumersPerSubscription=opt_int(body, "maxConsumersPerSubscription"),
            maxUnackedMessagesOnConsumer=opt_int(body, "maxUnackedMessagesOnConsumer"),
            maxUnackedMessagesOnSubscription=opt_int(body, "maxUnackedMessagesOnSubscription"),
            maxSubscriptionsPerTopic=opt_int(body, "maxSubscriptionsPerTopic"),
            schemaCompatibilityStrategy=opt_str(body, "schemaCompatibilityStrategy"),
            inactiveTopicPolicies=None
            if inactive is None
            else InactiveTopicPolicies.from_json(inactive),
            offloadPolicies=None if offload is None else OffloadPolicies.from_json(offload),
            extra={k: v for k, v in body.items() if k not in known},
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicPolicies:
        return cls.from_json(json_value(data, "topic policies"))
