"""The built-in connectors by name, and how a definition names one.

A source or sink definition without a package names a built-in in ``className`` (where
pulsar-admin's ``--source-type``/``--sink-type`` and the REST ``archive`` field
``builtin://NAME`` put it): ``builtin://datagen`` or just ``datagen``.

=========================  ======  ===================================================
name                       kind    module
=========================  ======  ===================================================
``datagen``                source  :mod:`~magnetar.functions.connectors.datagen_source`
``file``                   source  :mod:`~magnetar.functions.connectors.file_source`
``postgres``, ``jdbc-postgres``  sink  :mod:`~magnetar.functions.connectors.postgres_sink`
``webhook``, ``http``      sink    :mod:`~magnetar.functions.connectors.webhook_sink`
=========================  ======  ===================================================
"""

from __future__ import annotations

from magnetar.common.clock import Clock
from magnetar.functions.connectors.connector import InvalidConnectorConfig, Source
from magnetar.functions.function_config import ComponentKind, FunctionConfig
from magnetar.functions.function_loader import ProcessFn

BUILTIN_PREFIX = "builtin://"
SOURCES = ("datagen", "file")
SINKS = ("postgres", "jdbc-postgres", "webhook", "http")


def builtin_name(config: FunctionConfig) -> str:
    """The built-in's name from ``className`` (``builtin://`` taken off); raises
    :class:`InvalidConnectorConfig` when it names none of ``config.kind``'s built-ins."""
    name = (config.class_name or "").removeprefix(BUILTIN_PREFIX)
    known = SOURCES if config.kind is ComponentKind.SOURCE else SINKS
    if config.kind is ComponentKind.FUNCTION or name not in known:
        kind = config.kind.value
        raise InvalidConnectorConfig(
            f"className: no built-in {kind} named {name!r} (a {kind} without a package "
            f"needs one of: {', '.join(known)})"
        )
    return name


def make_sink(config: FunctionConfig) -> ProcessFn:
    """The built-in sink ``config`` names, built from its ``userConfig``; raises
    :class:`InvalidConnectorConfig`."""
    name = builtin_name(config)
    if name in ("postgres", "jdbc-postgres"):
        from magnetar.functions.connectors.postgres_sink import PostgresSink

        return PostgresSink(config.user_config).process
    from magnetar.functions.connectors.webhook_sink import WebhookSink

    return WebhookSink(config.user_config).process


def make_source(config: FunctionConfig, *, instance_id: int, clock: Clock) -> Source:
    """The built-in source ``config`` names, built from its ``userConfig``; raises
    :class:`InvalidConnectorConfig`."""
    name = builtin_name(config)
    if name == "datagen":
        from magnetar.functions.connectors.datagen_source import DatagenSource

        return DatagenSource(config.user_config, instance_id=instance_id, clock=clock)
    from magnetar.functions.connectors.file_source import FileSource

    return FileSource(
        config.user_config,
        instance_id=instance_id,
        parallelism=config.parallelism,
        clock=clock,
    )
