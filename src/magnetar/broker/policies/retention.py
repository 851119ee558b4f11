"""Retention: how long and how much acknowledged data a topic keeps (Pulsar's
``RetentionPolicies``)."""

from __future__ import annotations

from typing import Any

from magnetar.broker.policies.json_fields import json_int, json_object
from magnetar.common.frozen_struct import frozen_struct


@frozen_struct(kw_only=False)
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
        body = json_object(value, "retention policies")
        return cls(
            json_int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes"),
            json_int(body.get("retentionSizeInMB", 0), "retentionSizeInMB"),
        )
