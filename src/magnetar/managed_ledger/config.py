"""Configuration of a managed ledger (per namespace policy, supplied by the broker)."""

from __future__ import annotations

import enum

from magnetar.common.frozen_struct import frozen_struct


class BacklogQuotaPolicy(enum.Enum):
    """What happens when a backlog quota is exceeded (Pulsar's ``RetentionPolicy``)."""

    PRODUCER_EXCEPTION = "producer_exception"
    """``add_entry`` raises :class:`BacklogQuotaExceeded` until consumers catch up."""
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
    """The slowest cursors skip their oldest entries until the backlog fits."""


@frozen_struct(kw_only=False)
class ManagedLedgerConfig:
    """Limits of one managed ledger. ``-1`` means "no limit" where noted."""

    # rollover of the current ledger
    ledger_entries_max: int = 50_000
    ledger_size_max_bytes: int = 1024 * 1024 * 1024
    ledger_age_max_ms: int = 4 * 3600 * 1000
    ledger_inactive_rollover_ms: int = 60_000
    """A ledger holding entries that took no append for this long is closed and a new,
    empty one started at the next maintenance round (0: never), so an idle topic's consumed
    ledger can be trimmed and its bookies can drop it. Pulsar's
    ``managedLedgerInactiveLedgerRolloverTimeSeconds`` (off there by default); on here: an
    open ledger costs the broker 8 bytes and our bookies 12 bytes of memory per entry, and
    without it an idle topic kept up to ``ledger_entries_max`` entries' worth until the age
    limit, hours later."""
    ledger_age_min_ms: int = 0
    """A ledger younger than this does not roll over for entries/size (Pulsar's min time)."""
    ledger_properties: tuple[tuple[str, str], ...] = ()

    # appends
    pending_adds_max: int = 10_000
    """Appends in flight at once; ``add_entry`` waits for room beyond that."""
    add_attempts_max: int = 3
    """Ledgers one append is tried on. A write failure rolls over to a new ledger and
    re-sends the appends in flight there; an append that failed on this many ledgers fails
    with the last error instead, so a failure that follows the entry (or lasts) causes at
    most this many rollovers per append, not a loop."""

    write_retry_backoff_min_ms: int = 100
    write_retry_backoff_max_ms: int = 5_000
    """After writes fail twice in a row (a new ledger failed too) or a new ledger cannot be
    created, appends fail at once with the storage error, and a new ledger is tried on the
    first append after a backoff: ``min`` doubling per failure up to ``max``."""

    # reads
    cache_size_max_bytes: int = 64 * 1024 * 1024
    cache_eviction_age_ms: int = 1000
    """Cached entries older than this are dropped at the next maintenance rounds (between
    this and about twice this after they came; -1: only the byte bounds evict). Pulsar's
    ``managedLedgerCacheEvictionTimeThresholdMillis``, 1000 by default."""
    read_ahead_entries: int = 100
    """Catch-up reads fetch at least this many entries from bookies per request."""
    read_batch_max_entries: int = 1000
    read_ahead_bytes_max: int = 5 * 1024 * 1024
    """A catch-up read's read-ahead (``read_ahead_entries``) stops at about this many bytes,
    estimated from the ledger's average entry size: 100 entries of 5 MB would be 500 MB
    read at once. The entries asked for are read whatever their size."""
    open_readers_max: int = 32
    """Read handles of closed ledgers kept open (LRU)."""

    # cursors
    cursor_persist_interval_ms: int = 1000
    """A durable cursor's acknowledgements reach storage at most this late."""
    cursor_ledger_entries_max: int = 10_000
    """Snapshots per cursor ledger before switching to a new one."""
    cursor_ranges_persist_max: int = 500_000
    """Acknowledged ranges stored per snapshot (beyond: redelivered after a crash)."""

    # retention, TTL, backlog quota (-1: unlimited / disabled)
    retention_time_ms: int = 0
    retention_size_bytes: int = 0
    message_ttl_ms: int = -1
    backlog_quota_size_bytes: int = -1
    backlog_quota_time_ms: int = -1
    backlog_quota_policy: BacklogQuotaPolicy = BacklogQuotaPolicy.PRODUCER_EXCEPTION

    # tiered storage (offload: the driver and its object store are the broker's)
    offload_threshold_bytes: int = -1
    """Offload closed ledgers, oldest first, while the bytes on bookies exceed this (-1: off,
    0: every ledger once it closes)."""
    offload_threshold_ms: int = -1
    """Offload closed ledgers older than this (-1: off)."""
    offload_deletion_lag_ms: int = 4 * 3600 * 1000
    """The bookie copy of an offloaded ledger is deleted this long after the offload
    completed (0: at once)."""
    offload_read_bookkeeper_first: bool = False
    """Read an offloaded ledger from its bookie copy while that exists (Pulsar's
    ``bookkeeper-first``), else from the object store."""

    # background work
    maintenance_interval_ms: int = 1000
    """How often to persist dirty cursors, roll over by age, trim and apply TTL/quota."""
    metadata_retries_max: int = 5
