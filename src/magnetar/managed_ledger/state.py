"""A managed ledger's lifecycle as one value (Pulsar's ``ManagedLedgerImpl.State``).

::

    OPEN ──roll──▶ ROLLING ──new ledger──▶ OPEN
      ▲              │
      │              └──storage fails──▶ WRITE_FAILED ──backoff over, an append──▶ ROLLING
      │
    OPEN, ROLLING, WRITE_FAILED ──terminate──▶ TERMINATED
    OPEN, ROLLING, WRITE_FAILED ──another owner──▶ FENCED
    any ──close──▶ CLOSED

``OPEN``: the current ledger takes appends. ``ROLLING``: the current ledger is closing
and the next one is being created; appends wait in the queue. ``WRITE_FAILED``: storage
failed (see :mod:`~magnetar.managed_ledger.add_pipeline`), no ledger is open, appends fail
at once until the backoff ends. ``TERMINATED``: no append is ever taken again; reads and
cursors work (a rollover already under way still finishes). ``FENCED``: another process
owns the log; everything fails. ``CLOSED``: :meth:`ManagedLedger.close` ran.

Fencing is also kept as its cause (``ManagedLedger.fence_cause``), which every operation
checks first: a fenced ledger that is then closed, or a terminated one that is then
fenced (it stays ``TERMINATED``: the log is terminated for every owner), still raises
:class:`~magnetar.managed_ledger.errors.ManagedLedgerFenced`.

The values are Pulsar's state names.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    OPEN = "LedgerOpened"
    ROLLING = "ClosingLedger"
    WRITE_FAILED = "WriteFailed"
    TERMINATED = "Terminated"
    FENCED = "Fenced"
    CLOSED = "Closed"


TAKES_ADDS = frozenset({State.OPEN, State.ROLLING})
"""States in which an append is queued without further checks (backlog quota aside)."""

ROLL_STARTS = frozenset({State.OPEN, State.WRITE_FAILED})
"""States that a requested rollover moves to ``ROLLING``; in ``TERMINATED`` a rollover
(a failed write's) runs without changing the state."""
