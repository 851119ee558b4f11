"""A lifeline from a worker to each instance process it starts: the instance ends when its
worker does, however the worker ended (SIGKILL included).

The worker makes a pipe per instance process, keeps the write end and hands the read end to
the child (``pass_fds``; the child learns its number from ``--lifeline-fd``). Nobody ever
writes to it. The kernel closes the write end when the worker's process ends, for whatever
reason, and the child's blocking read then returns end-of-file: the child stops as it does
on SIGTERM (closing its client, writing its last status) and, should that hang, exits
after :data:`LIFELINE_EXIT_GRACE_MS`.

Why a pipe rather than ``prctl(PR_SET_PDEATHSIG)``: the death signal fires when the *thread*
that forked the child ends, not the process, so a worker that starts instances from a
helper thread would kill them early; between the fork and the ``prctl`` call the parent can
die unnoticed (a ``getppid`` check is needed to close that race); and it is Linux only. The
pipe has none of this: its end-of-file is a state, not an event, so a child that starts
reading after its worker already died sees it at once; it depends on nothing but the
process's file table, and it works on every POSIX system.

The write end is opened close-on-exec, so no other child of the worker (another instance,
``pip``) holds it and keeps a dead worker's instances alive; the child marks its read end
close-on-exec again, so processes the function starts do not inherit it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

LIFELINE_EXIT_GRACE_MS = 10_000
"""How long an instance whose worker died may take to stop cleanly before it exits hard."""


class Lifeline:
    """The worker's side: one pipe for one instance process.

    ``child_fd`` goes into the child's ``pass_fds`` and command line; call
    :meth:`child_started` once the child runs (the worker drops its copy of the read end)
    and :meth:`close` once the child has ended. Both are idempotent."""

    def __init__(self) -> None:
        self.child_fd, self._write_fd = os.pipe()  # both close-on-exec (PEP 446)

    def child_started(self) -> None:
        self._close_fd("child_fd")

    def close(self) -> None:
        self._close_fd("child_fd")
        self._close_fd("_write_fd")

    def _close_fd(self, attr: str) -> None:
        fd = getattr(self, attr)
        if fd >= 0:
            setattr(self, attr, -1)
            with contextlib.suppress(OSError):
                os.close(fd)


def watch_lifeline(fd: int, *, grace_ms: int = LIFELINE_EXIT_GRACE_MS) -> threading.Thread:
    """The instance's side: a daemon thread that waits for end-of-file on ``fd``, then sends
    this process SIGTERM (its usual clean stop) and, if it is still alive ``grace_ms`` later,
    ends it with ``os._exit(1)``. Returns the started thread."""
    os.set_inheritable(fd, False)

    def watch() -> None:
        while True:
            try:
                data = os.read(fd, 1)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
        os.kill(os.getpid(), signal.SIGTERM)
        # Wall-clock wait in a daemon thread of a process that is ending: no event loop
        # runs here to take an injected clock from.
        time.sleep(grace_ms / 1000)
        os._exit(1)

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread
