"""Backlog quotas: the limits on a topic's backlog (size and age) and on a namespace's
backlogs together, and what happens past them (Pulsar's ``BacklogQuota``)."""

from __future__ import annotations

import enum
from typing import Any

from magnetar.broker.policies.json_fields import PolicyError, json_int, json_object
from magnetar.common.frozen_struct import frozen_struct


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


@frozen_struct(kw_only=False)
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
        body = json_object(value, "backlog quota")
        size = body.get("limitSize", body.get("limit", -1))
        try:
            policy = BacklogQuotaPolicy(body.get("policy") or "producer_request_hold")
        except ValueError as exc:
            raise PolicyError(f"unknown backlog quota policy {body.get('policy')!r}") from exc
        return cls(
            json_int(size, "limitSize"), json_int(body.get("limitTime", -1), "limitTime"), policy
        )


def quota_map(value: Any) -> dict[BacklogQuotaType, BacklogQuota]:
    result: dict[BacklogQuotaType, BacklogQuota] = {}
    for key, quota in json_object(value or {}, "backlog quota map").items():
        try:
            kind = BacklogQuotaType(key)
        except ValueError as exc:
            raise PolicyError(f"unknown backlog quota type {key!r}") from exc
        result[kind] = BacklogQuota.from_json(quota)
    return result


def quota_map_json(quotas: dict[BacklogQuotaType, BacklogQuota]) -> dict[str, Any]:
    return {kind.value: quota.to_json() for kind, quota in sorted(quotas.items())}


NAMESPACE_STORAGE_QUOTA_KEY = "namespaceStorageQuota"
"""Where a namespace's storage quota in all is stored in its policies
(``magnetar.admin.storage_quota``)."""


@frozen_struct(kw_only=False)
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
