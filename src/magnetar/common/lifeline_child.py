"""The child's end of a lifeline (:mod:`magnetar.common.lifeline`) for a program that does
not read one itself::

    python -m magnetar.common.lifeline_child --fd N [--grace-ms MS] -m MODULE [ARG ...]
    python -m magnetar.common.lifeline_child --fd N [--grace-ms MS] -- PROGRAM [ARG ...]

``-m MODULE`` watches the lifeline from a thread of this process and runs ``MODULE`` as
``__main__`` in it, so the program's pid, signals and exit status are this process's; once
the parent has ended the program gets SIGTERM, and exits hard ``MS`` later if still alive.

``-- PROGRAM`` (a program that is not Python, such as ZooKeeper's ``java``) runs the program
as a child of this supervisor. The child gets the parent-death signal SIGKILL, set before
it execs: a SIGKILL of the supervisor takes the program with it. SIGTERM, SIGINT and SIGHUP
to the supervisor are passed on; once the lifeline's parent has ended the program gets
SIGTERM, and SIGKILL ``MS`` later if still alive. The supervisor exits with the program's
status (``128 + n`` for a program ended by signal ``n``, as a shell reports it). Here the
death signal is safe from its thread caveat: the supervisor's only thread forks.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from types import FrameType

from magnetar.common.lifeline import LIFELINE_EXIT_GRACE_MS, watch_lifeline

USAGE = "usage: python -m magnetar.common.lifeline_child --fd N [--grace-ms MS] (-m MODULE | -- PROGRAM) [ARG ...]"
PR_SET_PDEATHSIG = 1
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when ``parent_pid`` (this process) ends. The
    libc function is looked up before the fork, so the child only calls it."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def supervise(fd: int, argv: Sequence[str], grace_ms: int) -> int:
    """Run ``argv`` as a child tied to this process and to the lifeline ``fd``; return the
    exit status to report (see the module docstring)."""
    child = subprocess.Popen(argv, preexec_fn=_die_with(os.getpid()))

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)

    watch_lifeline(fd, grace_ms=grace_ms, stop=child.terminate, kill=child.kill)
    status = child.wait()
    return 128 - status if status < 0 else status


def main(args: Sequence[str] | None = None) -> int:
    """Parsed by hand: everything after ``-m MODULE`` or ``--`` belongs to the program,
    options that look like ours included."""
    rest = list(sys.argv[1:] if args is None else args)
    fd: int | None = None
    grace_ms = LIFELINE_EXIT_GRACE_MS
    while rest and rest[0] in ("--fd", "--grace-ms") and len(rest) >= 2:
        name, value = rest.pop(0), rest.pop(0)
        if not value.isdigit():
            return _usage(f"{name} {value!r} is not a number")
        if name == "--fd":
            fd = int(value)
        else:
            grace_ms = int(value)
    if fd is None:
        return _usage("--fd is required")
    if len(rest) >= 2 and rest[0] == "-m":
        module, argv = rest[1], rest[2:]
        watch_lifeline(fd, grace_ms=grace_ms)
        sys.argv = [module, *argv]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    if len(rest) >= 2 and rest[0] == "--":
        return supervise(fd, rest[1:], grace_ms)
    return _usage("give -m MODULE [ARG ...] or -- PROGRAM [ARG ...]")


def _usage(problem: str) -> int:
    print(f"{USAGE}\nerror: {problem}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
