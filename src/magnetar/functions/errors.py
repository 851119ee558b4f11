"""Errors of the Functions Worker, on the project's one root (:class:`MagnetarError`).

In a module of their own, free of the client: the REST routes (served by the standalone
from its start) catch them without importing the worker."""

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


class FunctionNotFound(FunctionsWorkerError):
    """No definition of that name (HTTP 404)."""


class FunctionExists(FunctionsWorkerError):
    """A definition of that name exists already (HTTP 409)."""


class InvalidRequest(FunctionsWorkerError):
    """The request cannot be carried out as given (HTTP 400)."""


class TriggerTimeout(FunctionsWorkerError):
    """A triggered function produced no output in time (HTTP 408)."""


class LeaderUnavailable(FunctionsWorkerError):
    """No leader can take a write right now (HTTP 503): an election or a new leader's
    catch-up is in progress."""

    retriable = True


class PackageTooLarge(FunctionsWorkerError):
    """An upload over the worker's ``package_bytes_max``."""
