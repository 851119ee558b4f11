"""Errors of the Functions Worker, on the project's one root (:class:`MagnetarError`)."""

from __future__ import annotations

from magnetar.common.errors import MagnetarError


class FunctionsWorkerError(MagnetarError):
    """Root of the Functions Worker's own errors."""


class NotLeader(FunctionsWorkerError):
    """A leader-only write reached a worker that does not hold the assignments producer
    (it is not the leader, has not taken the producer yet, or was fenced by a newer leader)."""


class MembershipUnavailable(FunctionsWorkerError):
    """The coordination topic's stats could not be read (broker unreachable, refused, or an
    answer without the coordination subscription)."""

    retriable = True
