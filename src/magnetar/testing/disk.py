"""Small disks for storage-fault tests: a size-limited tmpfs, and filling it up.

Mounting needs root (as in CI). :class:`Tmpfs` mounts at an empty directory and unmounts
on exit, even when the test fails; :func:`fill_disk` writes a file until the file system
answers ``ENOSPC``, so whatever else writes there (a bookie) runs out of space too.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Final, Self

_CHUNK: Final = bytes(1024 * 1024)


class Tmpfs:
    """A tmpfs of ``size_mib`` MiB mounted at ``mount_point`` (created if missing)."""

    def __init__(self, mount_point: Path, size_mib: int) -> None:
        self.path = mount_point
        self.size_mib = size_mib
        self._mounted = False

    def mount(self) -> None:
        """Mount it. Raises ``RuntimeError`` with ``mount``'s message if that fails."""
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mib}m", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"cannot mount a tmpfs at {self.path}: {done.stderr.strip()}")
        self._mounted = True

    def unmount(self) -> None:
        """Unmount it (lazily, so a process still holding files there does not block)."""
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
            self._mounted = False

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def __enter__(self) -> Self:
        self.mount()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unmount()


def fill_disk(path: Path, leave_bytes: int = 0) -> int:
    """Write ``path`` until its file system has at most ``leave_bytes`` free (0: until it
    answers ``ENOSPC``); returns the bytes written. Delete the file to give the space back."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(_CHUNK)
        while True:
            if leave_bytes:
                st = os.statvfs(path)
                room = st.f_bavail * st.f_frsize - leave_bytes
                if room <= 0:
                    return written
                view = view[: min(len(view), room)]
            try:
                written += os.write(fd, view)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(view) == 1:
                    return written
                view = view[: len(view) // 2]  # fill the last blocks too
    finally:
        os.close(fd)
