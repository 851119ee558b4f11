"""Topic and namespace names as the admin CLI accepts them, and their REST paths.

Short names follow ``pulsar-admin``: ``my-topic`` means ``persistent://public/default/my-topic``,
``t/ns/my-topic`` means ``persistent://t/ns/my-topic``. Names are checked with
:mod:`magnetar.common.names`, the broker's own rules; a malformed name is a usage error
(:class:`click.BadParameter`, exit status 2) saying what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import click

from magnetar.common.errors import InvalidTopicName
from magnetar.common.names import NamespaceName, TopicName, check_named_entity


@dataclass(frozen=True, slots=True)
class Topic:
    domain: str
    tenant: str
    namespace: str
    local: str

    @property
    def full(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def path(self) -> str:
        """``/admin/v2/{domain}/{tenant}/{ns}/{quoted local name}`` (``T`` in §8.1)."""
        return (
            f"/admin/v2/{self.domain}/{quote(self.tenant, safe='')}/"
            f"{quote(self.namespace, safe='')}/{quote(self.local, safe='')}"
        )


def parse_topic(name: str) -> Topic:
    try:
        topic = TopicName.parse(name)
    except InvalidTopicName as exc:
        raise click.BadParameter(exc.message) from None
    return Topic(topic.domain.value, topic.tenant, topic.namespace, topic.local_name)


def namespace_path(name: str) -> str:
    """``tenant/ns`` -> ``/admin/v2/namespaces/tenant/ns``."""
    try:
        namespace = NamespaceName.parse(name)
    except InvalidTopicName as exc:
        raise click.BadParameter(exc.message) from None
    return f"/admin/v2/namespaces/{namespace.tenant}/{namespace.namespace}"


def tenant_path(name: str) -> str:
    try:
        check_named_entity("tenant", name)
    except InvalidTopicName as exc:
        raise click.BadParameter(exc.message) from None
    return f"/admin/v2/tenants/{name}"


class TopicType(click.ParamType):  # type: ignore[type-arg]
    name = "topic"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Topic:
        if isinstance(value, Topic):
            return value
        try:
            return parse_topic(str(value))
        except click.BadParameter as e:
            self.fail(e.message, param, ctx)


TOPIC = TopicType()
