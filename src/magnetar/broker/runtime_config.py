"""A broker's effective configuration as Pulsar's ``broker.conf`` keys
(``GET /admin/v2/brokers/configuration/runtime``, ``admin brokers get-runtime-config``).

Pulsar answers a map of key → value, both strings. Settings Magnetar shares with Pulsar get
Pulsar's key and unit (``keepAliveIntervalSeconds``, ``brokerDeduplicationEnabled``, …);
settings of its own get the field's name in camel case with its unit last
(``lookupOwnerWaitMs``). Secrets never appear: of the authentication settings only whether
it is on, the providers and the roles are shown, never keys or password files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from magnetar.broker.config import BrokerConfig

_Convert = Callable[[Any], object]


def _same(value: Any) -> object:
    return value


def _ms_to_s(value: Any) -> object:
    return int(value) // 1000


PULSAR_KEYS: Final[Mapping[str, tuple[str, _Convert]]] = {
    "host": ("bindAddress", _same),
    "port": ("brokerServicePort", _same),
    "tls_port": ("brokerServicePortTls", _same),
    "tls_cert_file": ("tlsCertificateFilePath", _same),
    "tls_key_file": ("tlsKeyFilePath", _same),
    "tls_trust_certs_file": ("tlsTrustCertsFilePath", _same),
    "tls_require_trusted_client_cert": ("tlsRequireTrustedClientCertOnConnect", _same),
    "advertised_address": ("advertisedAddress", _same),
    "cluster_name": ("clusterName", _same),
    "max_message_size_bytes": ("maxMessageSize", _same),
    "keep_alive_interval_ms": ("keepAliveIntervalSeconds", _ms_to_s),
    "allow_auto_topic_creation": ("allowAutoTopicCreation", _same),
    "auto_topic_creation_partitions": ("defaultNumPartitions", lambda n: max(int(n), 1)),
    "deduplication_enabled": ("brokerDeduplicationEnabled", _same),
    "dedup_snapshot_interval_ms": ("brokerDeduplicationSnapshotIntervalSeconds", _ms_to_s),
    "failover_delay_ms": ("activeConsumerFailoverDelayTimeMillis", _same),
    "max_connections": ("brokerMaxConnections", _same),
    "max_connections_per_ip": ("brokerMaxConnectionsPerIp", _same),
    "managed_ledger_cache_size_mb": ("managedLedgerCacheSizeMB", _same),
    "max_message_publish_buffer_size_mb": ("maxMessagePublishBufferSizeInMB", _same),
    "dispatch_entries_max": ("dispatcherMaxReadBatchSize", _same),
    "max_unacked_messages_per_consumer": ("maxUnackedMessagesPerConsumer", _same),
    "max_unacked_messages_per_subscription": ("maxUnackedMessagesPerSubscription", _same),
    "delayed_delivery_tick_ms": ("delayedDeliveryTickTimeMillis", _same),
    "delete_inactive_topics_enabled": ("brokerDeleteInactiveTopicsEnabled", _same),
    "delete_inactive_topics_frequency_s": ("brokerDeleteInactiveTopicsFrequencySeconds", _same),
    "delete_inactive_topics_mode": ("brokerDeleteInactiveTopicsMode", _same),
    "delete_inactive_topics_max_inactive_duration_s": (
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
        _same,
    ),
    "ensemble_size": ("managedLedgerDefaultEnsembleSize", _same),
    "write_quorum": ("managedLedgerDefaultWriteQuorum", _same),
    "ack_quorum": ("managedLedgerDefaultAckQuorum", _same),
}
"""Field of :class:`BrokerConfig` → (Pulsar's key, conversion to Pulsar's unit)."""

_NOT_SHOWN: Final = frozenset({"auth", "advertised_listeners", "broker_id"})
"""Fields shown differently (below) or not at all (``broker_id`` is a producer-name
counter, not Pulsar's broker id)."""


def camel_case(name: str) -> str:
    """``lookup_owner_wait_ms`` → ``lookupOwnerWaitMs``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def as_text(value: object) -> str:
    """A value as Pulsar prints it: ``true``/``false``, an empty string for unset, comma
    separated lists."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list, set, frozenset)):
        return ",".join(sorted(str(v) for v in value))
    return str(value)


def runtime_config(config: BrokerConfig, host_settings: Mapping[str, object]) -> dict[str, str]:
    """Every setting of ``config`` and the host's own (``host_settings``, already keyed by
    Pulsar's names, e.g. ``metadataStoreUrl``), sorted by key, values as strings."""
    found: dict[str, object] = {}
    for f in dataclasses.fields(config):
        if f.name in _NOT_SHOWN:
            continue
        value = getattr(config, f.name)
        key, convert = PULSAR_KEYS.get(f.name, (camel_case(f.name), _same))
        found[key] = convert(value)
    partitions = config.auto_topic_creation_partitions
    found["allowAutoTopicCreationType"] = "partitioned" if partitions > 0 else "non-partitioned"
    listeners = config.advertised_listeners
    found["advertisedListeners"] = ",".join(
        f"{listener.name}:{url}"
        for listener in listeners.listeners
        for url in (listener.broker_service_url, listener.broker_service_url_tls)
        if url is not None
    )
    found["internalListenerName"] = listeners.internal_name
    auth = config.auth
    found["authenticationEnabled"] = auth.authentication_enabled
    found["authenticationProviders"] = auth.providers
    found["anonymousUserRole"] = auth.anonymous_user_role
    found["authorizationEnabled"] = auth.authorization_enabled
    found["superUserRoles"] = auth.super_user_roles
    found.update(host_settings)
    return {key: as_text(found[key]) for key in sorted(found)}
