"""Errors of the bookie server alone: reasons it refuses to start.

The errors a bookie answers requests with belong to the protocol
(:mod:`magnetar.bookie_protocol.errors`).
"""

from __future__ import annotations

from magnetar.common.errors import MagnetarError


class CookieMismatch(MagnetarError):
    """The data directory belongs to another bookie id (or the registered cookie belongs to
    another data directory): the bookie refuses to start."""


class JournalCorrupt(MagnetarError):
    """Journal replay found a damaged record followed by valid ones (not a torn tail): the
    bookie refuses to start unless told to skip invalid records."""


class IndexCorrupt(MagnetarError):
    """The index file the checkpoint names is missing or shorter than the checkpoint says:
    files the bookie had synced are gone, so it refuses to start rather than serve without
    the ledgers they held."""
