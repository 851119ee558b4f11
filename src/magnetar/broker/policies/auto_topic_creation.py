"""Automatic topic creation per namespace (Pulsar's ``AutoTopicCreationOverride``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.broker.policies.json_fields import PolicyError, json_int, json_object


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
        body = json_object(value, "autoTopicCreationOverride")
        allow = body.get("allowAutoTopicCreation")
        if not isinstance(allow, bool):
            raise PolicyError("allowAutoTopicCreation must be true or false")
        partitions = body.get("defaultNumPartitions")
        return cls(
            allow,
            str(body.get("topicType") or "non-partitioned"),
            None if partitions is None else json_int(partitions, "defaultNumPartitions"),
        )
