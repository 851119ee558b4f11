"""Storage nodes ("bookies"): journal with group commit, entry logs + index, fencing,
garbage collection, registration in the metadata store. See :mod:`magnetar.bookie.bookie`
and ``docs/storage.md``."""

from magnetar.bookie.bookie import Bookie, BookieConfig

__all__ = ["Bookie", "BookieConfig"]
