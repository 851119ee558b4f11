"""Topic and namespace names as the admin CLI accepts them, and their REST paths.

Short names follow ``pulsar-admin``: ``my-topic`` means ``persistent://public/default/my-topic``,
``t/ns/my-topic`` means ``persistent://t/ns/my-topic``. A malformed name is a usage error
(:class:`click.BadParameter`, exit status 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import click

DOMAINS = ("persistent", "non-persistent")


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
    domain = "persistent"
    rest = name
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain not in DOMAINS:
            raise click.BadParameter(f"invalid topic domain {domain!r} in {name!r}")
    parts = rest.split("/")
    if len(parts) == 1 and "://" not in name:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts):
        raise click.BadParameter(
            f"invalid topic name {name!r} (expected topic, tenant/ns/topic or "
            "persistent://tenant/ns/topic)"
        )
    return Topic(domain, parts[0], parts[1], parts[2])


def namespace_path(name: str) -> str:
    """``tenant/ns`` -> ``/admin/v2/namespaces/tenant/ns``."""
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"invalid namespace name {name!r} (expected tenant/namespace)")
    return f"/admin/v2/namespaces/{quote(parts[0], safe='')}/{quote(parts[1], safe='')}"


def tenant_path(name: str) -> str:
    if not name or "/" in name:
        raise click.BadParameter(f"invalid tenant name {name!r}")
    return f"/admin/v2/tenants/{quote(name, safe='')}"


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
