"""Bookie processes for the multi-process tests (moved to :mod:`magnetar.testing.bookie`)."""

from magnetar.testing.bookie import BookieProcess

__all__ = ["BookieProcess"]
