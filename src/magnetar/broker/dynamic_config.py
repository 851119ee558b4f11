"""Dynamic broker configuration: broker-wide defaults changed at run time, cluster-wide,
without a restart (Pulsar's ``pulsar-admin brokers update-dynamic-config``).

The overrides live in the metadata store at :data:`DYNAMIC_CONFIG_PATH` (Pulsar's
``/admin/configuration``) as one JSON object, setting name -> value as text. Every broker
follows that node (:class:`DynamicConfigFollower`, started by the policy cache): at start and
after each change it computes its :class:`~magnetar.broker.policies.BrokerDefaults` as the
configured ones with the overrides on top (:func:`overridden`), and its loaded topics apply
them as they apply a namespace policy change. Removing an override restores the configured
value.

Only the settings in :data:`DYNAMIC_SETTINGS` can be changed (their ``broker.conf`` names);
they are the defaults that namespace and topic policies override.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from magnetar.common.errors import MagnetarError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.metadata.notifications import NotificationStream, StreamOverflow
from magnetar.metadata.store import (
    BadVersion,
    MetadataStore,
    MetadataStoreError,
    NodeExists,
    NotFound,
)

if TYPE_CHECKING:
    from magnetar.broker.policies import BrokerDefaults

log = logging.getLogger(__name__)

DYNAMIC_CONFIG_PATH: Final = "/admin/configuration"
UPDATE_ATTEMPTS_MAX: Final = 20
"""Compare-and-set retries of one update when other writers keep changing the node."""


class DynamicConfigError(MagnetarError):
    """An unknown setting name, or a value it cannot take."""


def _int_at_least(low: int) -> Callable[[str], int | bool]:
    def parse(text: str) -> int | bool:
        value = int(text.strip())
        if value < low:
            raise ValueError(f"must be {low} or more")
        return value

    return parse


def _bool(text: str) -> int | bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("must be true or false")
    return low == "true"


@frozen_struct(kw_only=False)
class DynamicSetting:
    """One dynamic setting: its ``broker.conf`` name, the ``BrokerDefaults`` field it sets,
    and its parser (raises ``ValueError``)."""

    name: str
    field: str
    parse: Callable[[str], int | bool]


DYNAMIC_SETTINGS: Final = {
    s.name: s
    for s in (
        DynamicSetting(
            "defaultRetentionTimeInMinutes", "retention_time_minutes", _int_at_least(-1)
        ),
        DynamicSetting("defaultRetentionSizeInMB", "retention_size_mb", _int_at_least(-1)),
        DynamicSetting("ttlDurationDefaultInSeconds", "message_ttl_s", _int_at_least(0)),
        DynamicSetting(
            "backlogQuotaDefaultLimitBytes", "backlog_quota_size_bytes", _int_at_least(-1)
        ),
        DynamicSetting("backlogQuotaDefaultLimitSecond", "backlog_quota_time_s", _int_at_least(-1)),
        DynamicSetting("brokerDeduplicationEnabled", "deduplication_enabled", _bool),
        DynamicSetting("maxProducersPerTopic", "max_producers_per_topic", _int_at_least(0)),
        DynamicSetting("maxConsumersPerTopic", "max_consumers_per_topic", _int_at_least(0)),
        DynamicSetting(
            "maxConsumersPerSubscription", "max_consumers_per_subscription", _int_at_least(0)
        ),
        DynamicSetting(
            "maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer", _int_at_least(0)
        ),
        DynamicSetting(
            "maxUnackedMessagesPerSubscription",
            "max_unacked_messages_per_subscription",
            _int_at_least(0),
        ),
        DynamicSetting("allowAutoTopicCreation", "allow_auto_topic_creation", _bool),
    )
}
"""The settings ``update-dynamic-config`` takes, by name (``list-dynamic-config``)."""


def checked_value(name: str, text: str) -> str:
    """``text`` as stored for setting ``name``. Raises :class:`DynamicConfigError`."""
    setting = DYNAMIC_SETTINGS.get(name)
    if setting is None:
        raise DynamicConfigError(f"{name} is not a dynamic configuration")
    try:
        setting.parse(text)
    except ValueError as exc:
        raise DynamicConfigError(f"invalid value {text!r} for {name}: {exc}") from None
    return text.strip()


def decode(raw: bytes) -> dict[str, str]:
    """The stored overrides; a malformed node reads as none (logged)."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        log.warning("ignoring malformed dynamic configuration at %s", DYNAMIC_CONFIG_PATH)
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): str(v) for k, v in doc.items()}


def overridden(base: BrokerDefaults, values: dict[str, str]) -> BrokerDefaults:
    """``base`` with every valid override of ``values`` applied (unknown names and bad
    values, from a newer or broken writer, are logged and skipped)."""
    changes: dict[str, int | bool] = {}
    for name, text in values.items():
        setting = DYNAMIC_SETTINGS.get(name)
        try:
            if setting is None:
                raise ValueError("not a dynamic configuration")
            changes[setting.field] = setting.parse(text)
        except ValueError as exc:
            log.warning("ignoring dynamic configuration %s=%r: %s", name, text, exc)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def read_values(store: MetadataStore) -> tuple[dict[str, str], int | None]:
    """(overrides, node version or None when the node does not exist)."""
    try:
        got = await store.get(DYNAMIC_CONFIG_PATH)
    except NotFound:
        return {}, None
    return decode(got.value), got.stat.version


async def update_values(
    store: MetadataStore, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """Write ``change(current)`` with compare-and-set; returns what was written."""
    for _ in range(UPDATE_ATTEMPTS_MAX):
        current, version = await read_values(store)
        values = change(dict(current))
        body = json.dumps(values, sort_keys=True).encode()
        try:
            if version is None:
                await store.create(DYNAMIC_CONFIG_PATH, body)
            else:
                await store.put(DYNAMIC_CONFIG_PATH, body, expected_version=version)
        except (BadVersion, NodeExists):
            continue
        return values
    raise DynamicConfigError("the dynamic configuration kept changing; try again")


class DynamicConfigFollower:
    """Calls ``apply(overrides)`` with the stored overrides at :meth:`start` and after every
    change of :data:`DYNAMIC_CONFIG_PATH` until :meth:`close`."""

    def __init__(
        self, store: MetadataStore, apply: Callable[[dict[str, str]], Awaitable[None]]
    ) -> None:
        self._store = store
        self._apply = apply
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        stream = self._store.notifications(DYNAMIC_CONFIG_PATH)
        await stream.wait_ready()
        await self._refresh()
        self._task = asyncio.create_task(self._follow(stream), name="dynamic-config")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _refresh(self) -> None:
        values, _ = await read_values(self._store)
        await self._apply(values)

    async def _follow(self, stream: NotificationStream) -> None:
        while True:
            try:
                async for event in stream:
                    if event.path == DYNAMIC_CONFIG_PATH:
                        await self._refresh()
                return  # the store closed
            except StreamOverflow:
                log.warning("dynamic configuration notifications overflowed; re-reading")
            except MetadataStoreError as exc:
                log.warning("reading the dynamic configuration failed: %s", exc)
                return
            finally:
                stream.close()
            stream = self._store.notifications(DYNAMIC_CONFIG_PATH)
            await stream.wait_ready()
            await self._refresh()
