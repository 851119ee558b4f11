"""``magnetar admin namespaces|topics set-publish-rate|get-publish-rate|remove-publish-rate``,
and the same for ``publish-rate-per-producer``, ``dispatch-rate``,
``subscription-dispatch-rate`` and ``subscribe-rate``; namespaces only:
``namespace-publish-rate`` and ``storage-quota``. With ``pulsar-admin``'s
options (REST: ``.../publishRate``, ``.../dispatchRate``, ``.../subscriptionDispatchRate``;
see docs/security.md). -1 means no limit.

Importing this module adds the commands to the ``namespaces`` and ``topics`` groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.topics import topics
from magnetar.cli.admin.units import size_bytes
from magnetar.cli.output import output_option, printer

_PUBLISH_OPTIONS = (
    click.option(
        "--msg-publish-rate", "-m", "msgs", type=int, default=-1, show_default=True,
        help="Messages per second (-1: no limit).",
    ),
    click.option(
        "--byte-publish-rate", "-b", "size", type=int, default=-1, show_default=True,
        help="Bytes per second (-1: no limit).",
    ),
)  # fmt: skip
_DISPATCH_OPTIONS = (
    click.option(
        "--msg-dispatch-rate", "-md", "msgs", type=int, default=-1, show_default=True,
        help="Messages per period (-1: no limit).",
    ),
    click.option(
        "--byte-dispatch-rate", "-bd", "size", type=int, default=-1, show_default=True,
        help="Bytes per period (-1: no limit).",
    ),
    click.option(
        "--dispatch-rate-period", "-dt", "period", type=click.IntRange(min=1), default=1,
        show_default=True, help="The period in seconds.",
    ),
    click.option(
        "--relative-to-publish-rate", "-rp", "relative", is_flag=True, default=False,
        help="The limit is the topic's publish rate plus these rates (relativeToPublishRate).",
    ),
)  # fmt: skip

_SUBSCRIBE_OPTIONS = (
    click.option(
        "--subscribe-rate", "-sr", "msgs", type=int, default=-1, show_default=True,
        help="Subscribes per period from one client address (-1: no limit).",
    ),
    click.option(
        "--subscribe-rate-period", "-st", "period", type=click.IntRange(min=1), default=30,
        show_default=True, help="The period in seconds.",
    ),
)  # fmt: skip


def _subscribe_body(msgs: int, period: int = 30, **_: Any) -> dict[str, Any]:
    return {"subscribeThrottlingRatePerConsumer": msgs, "ratePeriodInSecond": period}


def _publish_body(msgs: int, size: int, **_: Any) -> dict[str, Any]:
    return {"publishThrottlingRateInMsg": msgs, "publishThrottlingRateInByte": size}


def _dispatch_body(
    msgs: int, size: int, period: int = 1, relative: bool = False, **_: Any
) -> dict[str, Any]:
    return {
        "dispatchThrottlingRateInMsg": msgs,
        "dispatchThrottlingRateInByte": size,
        "ratePeriodInSecond": period,
        "relativeToPublishRate": relative,
    }


_KINDS: tuple[tuple[str, str, tuple[Any, ...], Callable[..., dict[str, Any]]], ...] = (
    ("publish-rate", "publishRate", _PUBLISH_OPTIONS, _publish_body),
    ("publish-rate-per-producer", "publishRatePerProducer", _PUBLISH_OPTIONS, _publish_body),
    ("dispatch-rate", "dispatchRate", _DISPATCH_OPTIONS, _dispatch_body),
    ("subscription-dispatch-rate", "subscriptionDispatchRate", _DISPATCH_OPTIONS, _dispatch_body),
    ("subscribe-rate", "subscribeRate", _SUBSCRIBE_OPTIONS, _subscribe_body),
)


def _add(
    group: click.Group,
    argument: Callable[[Any], Any],
    path_of: Callable[[Any], str],
    label_of: Callable[[Any], str],
    kind: tuple[str, str, tuple[Any, ...], Callable[..., dict[str, Any]]],
) -> None:
    name, segment, options, body_of = kind

    def set_rate(target: Any, **values: Any) -> None:
        body = body_of(**values)
        rest().post(f"{path_of(target)}/{segment}", body)
        printer().done(f"{segment} of {label_of(target)} set", target=label_of(target), **body)

    def get_rate(target: Any) -> None:
        printer().result(rest().get(f"{path_of(target)}/{segment}"))

    def remove_rate(target: Any) -> None:
        rest().delete(f"{path_of(target)}/{segment}")
        printer().done(f"{segment} of {label_of(target)} removed", target=label_of(target))

    command = set_rate
    for option in reversed(options):
        command = option(command)
    set_rate.__doc__ = f"Set the {name.replace('-', ' ')}."
    get_rate.__doc__ = f"Show the {name.replace('-', ' ')} (nothing when none is set)."
    remove_rate.__doc__ = f"Remove the {name.replace('-', ' ')}."
    group.command(f"set-{name}")(argument(output_option(command)))
    group.command(f"get-{name}")(argument(output_option(get_rate)))
    group.command(f"remove-{name}")(argument(output_option(remove_rate)))


def _topic_path(topic: Topic) -> str:
    return topic.path


def _topic_label(topic: Topic) -> str:
    return topic.full


_NAMESPACE_ARG = click.argument("target", metavar="TENANT/NAMESPACE")
_TOPIC_ARG = click.argument("target", type=TOPIC, metavar="TOPIC")
_STORAGE_QUOTA_OPTIONS = (
    click.option(
        "--limit-size", "-l", "limit", required=True,
        help="The namespace's backlog in all, in bytes (1024, 10M, 2G).",
    ),
    click.option(
        "--policy", "-p", type=click.Choice(["producer_request_hold", "producer_exception"]),
        default="producer_request_hold", show_default=True,
        help="What new producers get while the namespace is over it.",
    ),
)  # fmt: skip


def _storage_quota_body(limit: str, policy: str, **_: Any) -> dict[str, Any]:
    return {"limitSize": size_bytes(limit), "policy": policy}


_NAMESPACE_KINDS: tuple[tuple[str, str, tuple[Any, ...], Callable[..., dict[str, Any]]], ...] = (
    ("namespace-publish-rate", "namespacePublishRate", _PUBLISH_OPTIONS, _publish_body),
    ("storage-quota", "storageQuota", _STORAGE_QUOTA_OPTIONS, _storage_quota_body),
)
for _kind in _KINDS:
    _add(namespaces, _NAMESPACE_ARG, namespace_path, str, _kind)
    _add(topics, _TOPIC_ARG, _topic_path, _topic_label, _kind)
for _kind in _NAMESPACE_KINDS:
    _add(namespaces, _NAMESPACE_ARG, namespace_path, str, _kind)
