"""Every name in an admin URL is checked once, before any route runs.

The app-wide dependency :func:`check_path_names` reads the path parameters a route matched
(``tenant``, ``cluster``, ``namespace``, ``topic`` with its ``domain``, ``subscription``)
and validates them with :mod:`magnetar.common.names`, the same rules the binary protocol
applies. An invalid name is a 400 ``{"reason": ...}`` answer; no route sees it, so no
route can turn it into a metadata-store path. (Routes still parse names into
``TopicName``/``NamespaceName`` for their own use; the same rules make that parse succeed.)
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request

from magnetar.common.names import (
    TopicDomain,
    TopicName,
    check_named_entity,
    check_subscription_name,
)

_DOMAINS = {d.value: d for d in TopicDomain}


def check_path_names(request: Request) -> None:
    """FastAPI dependency. Raises :class:`~magnetar.common.errors.InvalidTopicName` or
    :class:`~magnetar.common.errors.InvalidSubscriptionName` (both answered 400)."""
    params = request.path_params
    for kind in ("tenant", "cluster", "namespace"):
        value = params.get(kind)
        if isinstance(value, str):
            check_named_entity(kind, value)
    topic = params.get("topic")
    domain = _DOMAINS.get(params.get("domain", ""))
    if isinstance(topic, str) and domain is not None:
        # The local name is URL-encoded once more inside the path, as Pulsar's clients send it.
        TopicName.of(domain, params.get("tenant", ""), params.get("namespace", ""), unquote(topic))
    subscription = params.get("subscription")
    if isinstance(subscription, str):
        check_subscription_name(subscription)
