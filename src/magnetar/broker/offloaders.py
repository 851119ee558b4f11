"""The broker's offloaders: one :class:`~magnetar.offload.offloader.BlobStoreOffloader` per
distinct :class:`~magnetar.offload.settings.OffloadDriverConfig` its topics' offload
policies name, shared by those topics (with its block cache), and one per driver recorded
in an offloaded ledger's context (its reads use that driver even after the policy changed).

Created on first use: the object-store library (obstore) is imported only when some topic
has offload configured, so a broker without tiered storage does not pay for it at start-up.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.offload.settings import OffloadDriverConfig

if TYPE_CHECKING:
    from magnetar.managed_ledger.offload import OffloadContext, Offloader

log = logging.getLogger(__name__)


class Offloaders:
    """Offloaders by driver configuration."""

    def __init__(self) -> None:
        self._by_config: dict[OffloadDriverConfig, Offloader] = {}

    def get(self, config: OffloadDriverConfig | None) -> Offloader | None:
        """The offloader of ``config`` (None: offload not configured, or the store cannot be
        opened with these settings, which is logged)."""
        if config is None:
            return None
        found = self._by_config.get(config)
        if found is None:
            from magnetar.offload.offloader import BlobStoreOffloader

            try:
                found = BlobStoreOffloader.open(config)
            except ValueError as exc:
                log.error("offload driver %s cannot be opened: %s", config.driver, exc)
                return None
            self._by_config[config] = found
        return found

    def for_context(self, context: OffloadContext) -> Offloader | None:
        """The offloader of the driver an offloaded ledger's context records (its name,
        bucket, region, endpoint or directory); None when that cannot be opened."""
        found = context.driver_metadata
        try:
            config = OffloadDriverConfig(
                context.driver_name,
                bucket=found.get("bucket"),
                region=found.get("region"),
                endpoint=found.get("endpoint"),
                directory=found.get("directory"),
            )
        except ValueError as exc:
            log.error("recorded offload driver %s cannot be opened: %s", context.driver_name, exc)
            return None
        return self.get(config)

    def all(self) -> list[Offloader]:
        return list(self._by_config.values())
