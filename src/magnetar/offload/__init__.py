"""Tiered storage: closed ledgers copied to an object store in Pulsar's block format and read
back from it (``docs/tiered-storage.md``)."""

from .block_format import BlockFormatError, OffloadIndex, data_key, index_key
from .object_store import (
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    OffloadDriverConfig,
    open_object_store,
)
from .offloader import BlobStoreOffloader, OffloadedDataError, OffloadResult

__all__ = [
    "BlobStoreOffloader",
    "BlockFormatError",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "OffloadDriverConfig",
    "OffloadIndex",
    "OffloadResult",
    "OffloadedDataError",
    "data_key",
    "index_key",
    "open_object_store",
]
