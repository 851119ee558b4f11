"""A lifeline from a parent process to each child it starts: the child ends when its parent
does, however the parent ended (SIGKILL included). A Functions Worker ties its instance
processes to itself with one; ``magnetar local-cluster`` its ZooKeeper, bookies and brokers.

The parent makes a pipe per child process, keeps the write end and hands the read end to
the child (``pass_fds``; the child learns its number from its command line). Nobody ever
writes to it. The kernel closes the write end when the parent's process ends, for whatever
reason, and the child's blocking read then returns end-of-file: the child stops as it does
on SIGTERM (a clean stop) and, should that hang, exits after :data:`LIFELINE_EXIT_GRACE_MS`.
A program that reads no lifeline itself (a Python module, or ZooKeeper's ``java``) is run
through :mod:`magnetar.common.lifeline_child`, which watches it on the program's behalf.

Why a pipe rather than ``prctl(PR_SET_PDEATHSIG)``: the death signal fires when the *thread*
that forked the child ends, not the process, so a parent that starts children from a
helper thread would kill them early; between the fork and the ``prctl`` call the parent can
die unnoticed (a ``getppid`` check is needed to close that race); and it is Linux only. The
pipe has none of this: its end-of-file is a state, not an event, so a child that starts
reading after its parent already died sees it at once; it depends on nothing but the
process's file table, and it works on every POSIX system.

The write end is opened close-on-exec, so no other child of the parent (another instance,
``pip``) holds it and keeps a dead parent's children alive; the child marks its read end
close-on-exec again, so processes the child starts do not inherit it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

LIFELINE_EXIT_GRACE_MS = 10_000
"""How long a child whose parent died may take to stop cleanly before it exits hard."""


class Lifeline:
    """The parent's side: one pipe for one child process.

    ``child_fd`` goes into the child's ``pass_fds`` and command line; call
    :meth:`child_started` once the child runs (the parent drops its copy of the read end)
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


def wait_for_end(fd: int) -> None:
    """Block until the lifeline ``fd`` reaches end-of-file (or cannot be read): the parent
    that holds its write end has ended."""
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return


def _stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def _end_this_process() -> None:
    os._exit(1)


def watch_lifeline(
    fd: int,
    *,
    grace_ms: int = LIFELINE_EXIT_GRACE_MS,
    stop: Callable[[], None] = _stop_this_process,
    kill: Callable[[], None] = _end_this_process,
) -> threading.Thread:
    """The child's side: a daemon thread that waits for end-of-file on ``fd``, then calls
    ``stop`` (by default: SIGTERM to this process, its usual clean stop) and ``grace_ms``
    later ``kill`` (by default ``os._exit(1)``, which does not return if this process is
    still alive). Returns the started thread."""
    os.set_inheritable(fd, False)

    def watch() -> None:
        wait_for_end(fd)
        stop()
        # Wall-clock wait in a daemon thread of a process that is ending: no event loop
        # runs here to take an injected clock from.
        time.sleep(grace_ms / 1000)
        kill()

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread


def lifeline_command(
    child_fd: int, argv: Sequence[str], *, grace_ms: int = LIFELINE_EXIT_GRACE_MS
) -> list[str]:
    """The command line that runs ``argv`` tied to the lifeline whose read end is
    ``child_fd`` (pass it in ``pass_fds``), through :mod:`magnetar.common.lifeline_child`:
    ``[python, "-m", module, ...]`` runs in that same process (its pid, signals and exit
    status are the module's); any other program runs under a small supervisor."""
    head = [sys.executable, "-m", "magnetar.common.lifeline_child", "--fd", str(child_fd),
            "--grace-ms", str(grace_ms)]  # fmt: skip
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return [*head, *argv[1:]]
    return [*head, "--", *argv]
