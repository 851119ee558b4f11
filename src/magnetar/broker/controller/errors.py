"""Errors of the controller's cores and election shell."""

from __future__ import annotations

from magnetar.common.errors import MagnetarError, ServerError


class StaleControllerEpoch(MagnetarError):
    """An input stamped with an epoch older than the controller's: it answers a command of a
    deposed controller and is dropped. Raised by every input of a controller state machine
    that carries an epoch (see :mod:`.epoch_fence`)."""


class ControllerDeposed(MagnetarError):
    """This controller saw a newer epoch (or its fenced write was refused): it must stop
    acting. Raised by every input of a deposed controller state machine and by the shell
    once its write was fenced."""

    retriable = True


class BundleBusy(MagnetarError):
    """The bundle is being assigned or released; the request may succeed once it settles."""

    retriable = True


class UnknownBundle(MagnetarError):
    """The bundle is not a current bundle of a namespace the controller knows (it may have
    been split)."""

    refresh_lookup = True


class NamespaceLimitReached(MagnetarError):
    """The controller already tracks ``namespaces_max`` namespaces; a new one is refused."""

    code = ServerError.ServiceNotReady
