"""Admission rules for SUBSCRIBE and UNSUBSCRIBE (reference §6.5, §6.11).

Pure functions over the subscription's current shape; the shell calls them before touching
any dispatcher and sends the raised error's wire code (``ERROR{code, message}``).

SUBSCRIBE, checked in Java's order (``PersistentSubscription.addConsumer`` then the
dispatcher's ``addConsumer``):

1. consumers exist and the subType differs → :class:`ConsumerBusy` ("Subscription is of
   different type…"; Java's SubscriptionBusyException maps to ConsumerBusy);
2. Key_Shared with consumers, but a different key-shared mode or allowOutOfOrderDelivery →
   :class:`ConsumerBusy`;
3. Exclusive with a consumer already connected → :class:`ConsumerBusy` ("Exclusive consumer is
   already connected");
4. ``max_consumers`` (> 0) reached → :class:`ConsumerBusy`.

Key_Shared STICKY range overlap → :class:`ConsumerAssignError` is decided by
:class:`magnetar.broker.key_shared.StickySelector` when the consumer is added.

UNSUBSCRIBE: allowed only for the only consumer of the subscription, which for
Exclusive/Failover must also be the active one; otherwise :class:`MetadataError`
"Unconnected or shared consumer attempting to unsubscribe".
"""

from __future__ import annotations

import enum

from magnetar.common.errors import ConsumerBusy, MetadataError
from magnetar.common.frozen_struct import frozen_struct


class SubType(enum.IntEnum):
    """Wire ``CommandSubscribe.SubType``."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class KeySharedMode(enum.IntEnum):
    """Wire ``KeySharedMode``."""

    AUTO_SPLIT = 0
    STICKY = 1


@frozen_struct(kw_only=False)
class KeySharedPolicy:
    """The subscription-wide part of ``KeySharedMeta`` (ranges are per consumer)."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    allow_out_of_order_delivery: bool = False


#: Subscription types whose acks are individual and whose redelivery counts are tracked.
INDIVIDUAL_ACK_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})


def check_subscribe(
    current_type: SubType | None,
    consumer_count: int,
    new_type: SubType,
    current_key_shared: KeySharedPolicy | None = None,
    new_key_shared: KeySharedPolicy | None = None,
    max_consumers: int = 0,
) -> None:
    """Raise :class:`ConsumerBusy` if a consumer of ``new_type`` may not join now.

    ``current_type`` is the dispatcher type (None for a new subscription);
    ``consumer_count`` the consumers connected now. A subscription without consumers takes
    any type (and any key-shared policy).
    """
    if consumer_count <= 0 or current_type is None:
        return
    if new_type != current_type:
        raise ConsumerBusy(
            "Subscription is of different type. Active subscription type of "
            f"'{current_type.name}' is different than the connecting consumer's type "
            f"'{new_type.name}'."
        )
    if new_type is SubType.Key_Shared:
        cur = current_key_shared or KeySharedPolicy()
        new = new_key_shared or KeySharedPolicy()
        if cur.mode != new.mode:
            raise ConsumerBusy(
                "Subscription is of different type. Active subscription key_shared mode of "
                f"'{cur.mode.name}' is different than the connecting consumer's key_shared mode "
                f"'{new.mode.name}'."
            )
        if cur.allow_out_of_order_delivery and not new.allow_out_of_order_delivery:
            raise ConsumerBusy(
                "Subscription is of different type. Active subscription allows out of order "
                "delivery while the connecting consumer does not allow it."
            )
        if new.allow_out_of_order_delivery and not cur.allow_out_of_order_delivery:
            raise ConsumerBusy(
                "Subscription is of different type. Active subscription does not allow out of "
                "order delivery while the connecting consumer allows it."
            )
    if new_type is SubType.Exclusive:
        raise ConsumerBusy("Exclusive consumer is already connected")
    if max_consumers > 0 and consumer_count >= max_consumers:
        raise ConsumerBusy("Subscription reached max consumers limit")


def check_unsubscribe(
    sub_type: SubType, consumer_count: int, is_member: bool, is_active: bool
) -> None:
    """Raise :class:`MetadataError` unless the requester may delete the subscription.

    ``is_active`` matters only for Exclusive/Failover (the single-active dispatcher).
    """
    single_active = sub_type in (SubType.Exclusive, SubType.Failover)
    if consumer_count == 1 and is_member and (is_active or not single_active):
        return
    raise MetadataError("Unconnected or shared consumer attempting to unsubscribe")
