"""Rate policies: Pulsar's ``PublishRate``, ``DispatchRate`` and ``SubscribeRate`` JSON read
into the limiters' rates (:mod:`magnetar.broker.rate_limit`).

A malformed value reads as ``None`` (no limit at this level) rather than an error: rates are
stored in the policies' ``extra`` fields, which the admin API writes without a schema.
"""

from __future__ import annotations

from typing import Any

from magnetar.broker.rate_limit import DispatchRate, PublishRate, SubscribeRate


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
