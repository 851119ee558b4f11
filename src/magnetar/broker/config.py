"""Broker settings (the subset of Pulsar's ``broker.conf`` Magnetar implements)."""

from __future__ import annotations

from dataclasses import field

from magnetar.auth.config import AuthConfig
from magnetar.broker.listeners import NO_LISTENERS, AdvertisedListeners
from magnetar.broker.partial_frames import (
    DEFAULT_PARTIAL_FRAME_BYTES_MAX,
    DEFAULT_PARTIAL_FRAME_TIMEOUT_MS,
)
from magnetar.broker.publish_buffer import DEFAULT_PUBLISH_BUFFER_SIZE_MB
from magnetar.common.frozen_struct import frozen_struct
from magnetar.managed_ledger.entry_cache import DEFAULT_CACHE_SIZE_MAX_BYTES
from magnetar.protocol import DEFAULT_MAX_MESSAGE_SIZE_BYTES


@frozen_struct(kw_only=False)
class BrokerConfig:
    """Settings of one broker. Defaults follow Pulsar's standalone where it has one."""

    host: str = "127.0.0.1"
    port: int = 6650
    """Binary protocol port; 0 picks a free port (read it back from ``BrokerServer.port``)."""
    tls_port: int | None = None
    """Port of the TLS listener (same binary protocol, ``pulsar+ssl://``); None = no TLS
    listener, 0 picks a free port (read it back from ``BrokerService.tls_port``)."""
    tls_cert_file: str | None = None
    """PEM certificate chain the TLS listener presents (needed when ``tls_port`` is set)."""
    tls_key_file: str | None = None
    """PEM private key (unencrypted) of ``tls_cert_file``."""
    tls_trust_certs_file: str | None = None
    """PEM CA bundle client certificates must chain to (mutual TLS); None = none asked."""
    tls_require_trusted_client_cert: bool = False
    """Refuse TLS clients without a certificate trusted by ``tls_trust_certs_file``."""
    advertised_address: str | None = None
    """Host name put in lookup answers (and HTTP URLs); ``host`` when unset. With
    ``advertised_listeners`` set, binary lookups answer with listeners instead."""
    advertised_listeners: AdvertisedListeners = NO_LISTENERS
    """Pulsar's ``advertisedListeners`` and ``internalListenerName``, parsed
    (:func:`magnetar.broker.listeners.parse_advertised_listeners`). Lookups naming a
    listener get its URLs; lookups without a name get the internal listener's."""
    cluster_name: str = "standalone"
    broker_id: int = 0
    """Used in broker-assigned producer names ``<cluster>-<broker_id>-<n>``."""
    max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES
    """Advertised in CONNECTED; frames above this plus 10 KiB close the connection."""
    keep_alive_interval_ms: int = 30_000
    allow_auto_topic_creation: bool = True
    auto_topic_creation_partitions: int = 0
    """0 creates non-partitioned topics on first use; N > 0 creates N partitions."""
    deduplication_enabled: bool = False
    """Pulsar's ``brokerDeduplicationEnabled``."""
    dedup_snapshot_interval_ms: int = 1_000
    failover_delay_ms: int = 1_000
    """Pulsar's ``activeConsumerFailoverDelayTimeMillis``."""
    pending_sends_per_connection_max: int = 1_000
    """Beyond this many unanswered SENDs a connection stops reading until half are done."""
    max_message_publish_buffer_size_mb: int = DEFAULT_PUBLISH_BUFFER_SIZE_MB
    """Pulsar's ``maxMessagePublishBufferSizeInMB`` (0 = no bound; Pulsar's -1): MiB of
    SENDs all connections together may have handed to storage and not yet had answered;
    past it every publishing connection stops reading until half is answered
    (:mod:`magnetar.broker.publish_buffer`)."""
    partial_frame_bytes_max: int = DEFAULT_PARTIAL_FRAME_BYTES_MAX
    """Bytes all connections together may hold in frames not yet completely read; past
    it, a connection holding part of a frame stops reading until the total falls below."""
    partial_frame_timeout_ms: int = DEFAULT_PARTIAL_FRAME_TIMEOUT_MS
    """A frame not completely read this long after its first byte closes its connection."""
    max_connections: int = 0
    """Pulsar's ``brokerMaxConnections`` (0 = no limit): connections beyond it are
    answered Error ``NotAllowedError`` and closed."""
    max_connections_per_ip: int = 0
    """Pulsar's ``brokerMaxConnectionsPerIp`` (0 = no limit), per client IP address."""
    managed_ledger_cache_size_mb: int = DEFAULT_CACHE_SIZE_MAX_BYTES // (1024 * 1024)
    """Pulsar's ``managedLedgerCacheSizeMB``: MiB the tailing-read caches of all topics of
    this broker hold together (0 turns them off); past it the largest give up their oldest
    entries (:class:`~magnetar.managed_ledger.entry_cache.EntryCacheBudget`)."""
    dispatch_entries_max: int = 100
    """Entries read per dispatch round of one subscription."""
    dispatcher_max_read_size_bytes: int = 5 * 1024 * 1024
    """Pulsar's ``dispatcherMaxReadSizeBytes`` (0 = no bound): bytes read per dispatch round
    of one subscription, estimated from the ledger's average entry size (at least one
    entry); with ``dispatch_entries_max`` alone a round of 100 entries of 5 MB read 500 MB."""
    unacked_entries_per_consumer_max: int = 50_000
    """A Shared consumer holding this many unacknowledged entries gets no more."""
    max_unacked_messages_per_consumer: int = 50_000
    """Pulsar's ``maxUnackedMessagesPerConsumer`` (Shared/Key_Shared; 0 = unlimited): a
    consumer holding this many unacknowledged messages gets no more until half are acked."""
    max_unacked_messages_per_subscription: int = 200_000
    """Pulsar's ``maxUnackedMessagesPerSubscription`` (Shared/Key_Shared; 0 = unlimited)."""
    delayed_delivery_tick_ms: int = 100
    orphan_reader_subscription_timeout_ms: int = 60_000
    """A non-durable (reader) subscription emptied by a seek waits this long for its
    consumer to come back before it is dropped."""
    lookup_owner_wait_ms: int = 10_000
    """Cluster mode: how long a lookup of a bundle no broker holds yet waits for the
    controller to assign it before answering ServiceNotReady (the client retries)."""
    delete_inactive_topics_enabled: bool = False
    """Pulsar's ``brokerDeleteInactiveTopicsEnabled`` (Pulsar's default is true): delete
    topics inactive for the max duration (:mod:`magnetar.broker.inactive_topics`). Off by
    default: function packages and state live here in topics that have no subscription
    between reads, which Pulsar keeps elsewhere."""
    delete_inactive_topics_frequency_s: int = 60
    """Pulsar's ``brokerDeleteInactiveTopicsFrequencySeconds``: how often topics are checked."""
    delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    """Pulsar's ``brokerDeleteInactiveTopicsMode``: ``delete_when_no_subscriptions`` or
    ``delete_when_subscriptions_caught_up``."""
    delete_inactive_topics_max_inactive_duration_s: int | None = None
    """Pulsar's ``brokerDeleteInactiveTopicsMaxInactiveDurationSeconds`` (None: the
    frequency)."""
    auth: AuthConfig = field(default_factory=AuthConfig)
    """Authentication and authorization (off by default; ``magnetar.auth``)."""
    ensemble_size: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1
    offload_driver: str | None = None
    """Pulsar's ``managedLedgerOffloadDriver`` (``filesystem``, ``aws-s3``, ``s3``): the
    broker's default object store for tiered storage (None: offload not configured unless a
    namespace or topic offload policy names one)."""
    offload_bucket: str | None = None
    """Pulsar's ``s3ManagedLedgerOffloadBucket``."""
    offload_region: str | None = None
    """Pulsar's ``s3ManagedLedgerOffloadRegion``."""
    offload_endpoint: str | None = None
    """Pulsar's ``s3ManagedLedgerOffloadServiceEndpoint``."""
    offload_directory: str | None = None
    """The ``filesystem`` driver's root directory (Pulsar's ``fileSystemURI``)."""
    offload_threshold_bytes: int = -1
    """Pulsar's ``managedLedgerOffloadThresholdInBytes``: offload closed ledgers while a
    topic's storage on the bookies exceeds this (-1: off; 0: every ledger as it closes)."""
    offload_deletion_lag_ms: int = 4 * 3600 * 1000
    """Pulsar's ``managedLedgerOffloadDeletionLagMs``: a bookie copy is deleted this long
    after its offload completed."""
    offload_read_priority: str = "tiered-storage-first"
    """Pulsar's ``managedLedgerDataReadPriority``: ``tiered-storage-first`` or
    ``bookkeeper-first``."""
