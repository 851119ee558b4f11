"""The member list and the leader, as the coordination topic's stats show them (sans-IO).

``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats`` answers, for the coordination
subscription, its consumers (``consumers[].consumerName``, spelled ``workerId:host:port``) and
its ``activeConsumerName``: the members and the leader. :func:`membership_from_stats` reads
that answer; a consumer whose name is not a worker's (someone else subscribed under the
same subscription) is listed in :attr:`MembershipView.foreign_consumers`, never as a member.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.functions.errors import MembershipUnavailable
from magnetar.functions.worker_info import InvalidWorkerInfo, WorkerInfo


@dataclass(frozen=True, slots=True)
class MembershipView:
    """Members sorted by worker id (then host, port); ``leader`` is None while the broker
    has no active consumer (no members, or a failover delay in progress)."""

    members: tuple[WorkerInfo, ...]
    leader: WorkerInfo | None
    foreign_consumers: tuple[str, ...] = ()


def membership_from_stats(stats: Mapping[str, Any], subscription: str) -> MembershipView:
    """Read a topic-stats answer. Raises :class:`MembershipUnavailable` when it has no
    ``subscription`` (no worker ever joined) or is malformed."""
    try:
        sub = stats["subscriptions"][subscription]
        consumers = [str(c["consumerName"]) for c in sub["consumers"]]
        active = sub.get("activeConsumerName")
    except (KeyError, TypeError) as exc:
        raise MembershipUnavailable(
            f"topic stats have no subscription {subscription!r} with consumers ({exc!r})"
        ) from None
    members: set[WorkerInfo] = set()
    foreign: list[str] = []
    for name in consumers:
        try:
            members.add(WorkerInfo.parse(name))
        except InvalidWorkerInfo:
            foreign.append(name)
    leader = None
    if isinstance(active, str):
        try:
            leader = WorkerInfo.parse(active)
        except InvalidWorkerInfo:
            leader = None
    return MembershipView(tuple(sorted(members)), leader, tuple(sorted(foreign)))
