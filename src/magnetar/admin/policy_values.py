"""Policy values in admin request bodies, parsed and validated as Pulsar's admin does
(shared by namespace and topic policies): a malformed value is a 400 ``BadRequest``, a
well-formed value Pulsar refuses is a 412 ``PreconditionFailed`` with Pulsar's reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar.admin.errors import BadRequest, PreconditionFailed
from magnetar.admin.request_body import as_int, as_object
from magnetar.broker.policies import PersistencePolicies, PolicyError, RetentionPolicies


def policy_json(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` (a policy's ``from_json``) answering 400 for a malformed value."""

    def run(value: Any) -> Any:
        try:
            return parse(value)
        except PolicyError as exc:
            raise BadRequest(str(exc)) from exc

    return run


def non_negative(what: str) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = as_int(value, what)
        if number < 0:
            raise PreconditionFailed(f"{what} must be 0 or more")
        return number

    return parse


def message_ttl(value: Any) -> int:
    number = as_int(value, "messageTTL")
    if number < 0:
        raise PreconditionFailed("Invalid value for message TTL")
    return number


def retention_policies(value: Any) -> RetentionPolicies:
    """Pulsar's ``validateRetentionPolicies``: limits of -1 or more, and 0 only for both."""
    body = as_object(value, "retention policies")
    try:
        retention = RetentionPolicies.from_json(body)
    except PolicyError as exc:
        raise BadRequest(str(exc)) from exc
    minutes, mb = retention.retention_time_minutes, retention.retention_size_mb
    if mb < -1:
        raise PreconditionFailed("Invalid retention policy: size limit must be >= -1")
    if minutes < -1:
        raise PreconditionFailed("Invalid retention policy: time limit must be >= -1")
    if (minutes == 0) != (mb == 0):
        raise PreconditionFailed(
            "Invalid retention policy: Setting a single time or size limit to 0 is invalid "
            "when one of the limits has a non-zero value. Use the value of -1 instead of 0 to "
            "ignore a specific limit. To disable retention both limits must be set to 0."
        )
    return retention


def persistence_policies(value: Any) -> PersistencePolicies:
    body = as_object(value, "persistence policies")
    numbers = []
    for key in ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum"):
        numbers.append(as_int(body.get(key, 0), key))
    ensemble, write, ack = numbers
    if not (ensemble >= write >= ack) or ack < 1:
        raise PreconditionFailed(
            f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuoru ({ack})"
        )
    try:
        return PersistencePolicies.from_json(body)
    except PolicyError as exc:
        raise BadRequest(str(exc)) from exc
