"""Inactive topics: whether and when the broker deletes a topic nobody uses (Pulsar's
``InactiveTopicPolicies``). The broker's check is :mod:`magnetar.broker.inactive_topics`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from magnetar.broker.policies.json_fields import PolicyError, json_int, json_object


class InactiveTopicDeleteMode(StrEnum):
    """Pulsar's ``InactiveTopicDeleteMode``: which topics without clients count as
    inactive."""

    DELETE_WHEN_NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
    """Only a topic with no subscription at all."""
    DELETE_WHEN_SUBSCRIPTIONS_CAUGHT_UP = "delete_when_subscriptions_caught_up"
    """Also a topic whose every subscription has acknowledged everything."""


def delete_mode(value: Any) -> InactiveTopicDeleteMode:
    """Raises :class:`PolicyError` for anything but one of the two mode names."""
    try:
        return InactiveTopicDeleteMode(value)
    except ValueError:
        names = ", ".join(mode.value for mode in InactiveTopicDeleteMode)
        raise PolicyError(f"inactiveTopicDeleteMode must be one of {names}: {value!r}") from None


@dataclass(frozen=True, slots=True)
class InactiveTopicPolicies:
    """``{"inactiveTopicDeleteMode", "maxInactiveDurationSeconds", "deleteWhileInactive"}``:
    with ``deleteWhileInactive`` a topic inactive (``delete_mode``) for at least
    ``max_inactive_duration_s`` is deleted. One object: a topic's replaces its
    namespace's, which replaces the broker's (``brokerDeleteInactiveTopics*``)."""

    delete_mode: InactiveTopicDeleteMode = InactiveTopicDeleteMode.DELETE_WHEN_NO_SUBSCRIPTIONS
    max_inactive_duration_s: int = 60
    delete_while_inactive: bool = False

    def __post_init__(self) -> None:
        if self.max_inactive_duration_s < 0:
            raise PolicyError(
                f"maxInactiveDurationSeconds must be 0 or more, got {self.max_inactive_duration_s}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "inactiveTopicDeleteMode": self.delete_mode.value,
            "maxInactiveDurationSeconds": self.max_inactive_duration_s,
            "deleteWhileInactive": self.delete_while_inactive,
        }

    @classmethod
    def from_json(cls, value: Any) -> InactiveTopicPolicies:
        """Pulsar's defaults for missing fields (mode ``delete_when_no_subscriptions``,
        0 seconds, false). Raises :class:`PolicyError`."""
        body = json_object(value, "inactive topic policies")
        enabled = body.get("deleteWhileInactive", False)
        if not isinstance(enabled, bool):
            raise PolicyError("deleteWhileInactive must be true or false")
        return cls(
            delete_mode(body.get("inactiveTopicDeleteMode") or "delete_when_no_subscriptions"),
            json_int(body.get("maxInactiveDurationSeconds", 0), "maxInactiveDurationSeconds"),
            enabled,
        )


DEFAULT_INACTIVE_TOPIC_POLICIES = InactiveTopicPolicies()
"""Magnetar's broker default: inactive topics are kept (see ``BrokerConfig``)."""
