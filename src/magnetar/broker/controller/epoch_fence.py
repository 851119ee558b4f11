"""The epoch fence that every state machine of the controller keeps (sans-IO).

A machine is built for one controller epoch. An answer stamped with an older epoch raises
:class:`StaleControllerEpoch` (a command of a deposed controller was answered late); an epoch
newer than its own, seen through :meth:`EpochFenced.epoch_changed` or stamped on an answer,
deposes the machine, and from then on every input raises :class:`ControllerDeposed`. A
record persisted at a newer epoch than the machine's means a newer controller already
acted, so resuming from it raises :class:`StaleControllerEpoch`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from magnetar.broker.controller.errors import ControllerDeposed, StaleControllerEpoch

EffectT = TypeVar("EffectT")


class EpochFenced(Generic[EffectT]):
    """Base of :class:`~.bundle_state_machine.BundleStateMachine` and
    :class:`~.replica_state_machine.ReplicaStateMachine`: the epoch, the deposed flag and the
    start-once guard. ``EffectT`` is the machine's effect type."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._deposed = False
        self._started = False

    @property
    def deposed(self) -> bool:
        return self._deposed

    def epoch_changed(self, epoch: int) -> list[EffectT]:
        """A controller epoch was observed; a newer one deposes this machine."""
        if epoch > self.epoch:
            self._deposed = True
        return []

    def _check_resumable(self, what: str, record_epoch: int) -> None:
        """Raise :class:`StaleControllerEpoch` if ``what`` (a persisted record) was written
        at a newer epoch than this machine's."""
        if record_epoch > self.epoch:
            raise StaleControllerEpoch(
                f"{what} was written at epoch {record_epoch}, after epoch {self.epoch}"
            )

    def _begin_start(self) -> None:
        """Guard of ``start()``: raises :class:`ControllerDeposed` once deposed and
        ``RuntimeError`` on a second call."""
        self._check_alive()
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True

    def _check_alive(self) -> None:
        if self._deposed:
            raise ControllerDeposed(f"the controller of epoch {self.epoch} was deposed")

    def _check_epoch(self, epoch: int) -> None:
        """Fence an answer stamped with ``epoch``: older raises :class:`StaleControllerEpoch`,
        newer deposes this machine and raises :class:`ControllerDeposed`."""
        self._check_alive()
        if epoch < self.epoch:
            raise StaleControllerEpoch(
                f"an answer to epoch {epoch}; this controller's epoch is {self.epoch}"
            )
        if epoch > self.epoch:
            self._deposed = True
            raise ControllerDeposed(f"an answer to epoch {epoch}: epoch {self.epoch} is over")
