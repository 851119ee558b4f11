"""``builtin://file``: a source that turns the lines of files appearing in a directory into
messages, one message per non-empty line (line ends removed), files oldest first.

Settings (``--source-config``): ``inputDirectory`` (required, an existing directory),
``fileFilter`` (a regular expression the whole file name must match; default ``[^.].*``,
every file whose name does not start with a dot), ``processedFileSuffix`` (default
``.processed``), ``pollingIntervalMs`` (how often the directory is listed when there is
nothing to read, default 1000).

A file is done once the broker stored all its lines: it is then renamed to
``name + processedFileSuffix``, and files with that suffix are never read. So a restarted
instance does not send a finished file again; one that stopped in the middle of a file sends
that file again from its start (at-least-once). Write a file under a name the filter skips
(``.name.tmp``) and rename it when complete, or its first half may be sent alone.

With ``parallelism`` above 1, each file belongs to one instance (CRC-32 of its name modulo
``parallelism``), so no file is sent twice by two instances.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import zlib
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from magnetar.common.clock import Clock
from magnetar.functions.connectors.connector import InvalidConnectorConfig, SourceRecord, setting

LINES_PER_READ_MAX = 1_000
"""Lines read from a file at once (records queued in memory at most)."""
LINE_BYTES_MAX = 5 * 1024 * 1024
"""A longer line is cut into pieces of this size (a message must fit the broker's limit)."""
FILE_NAME_PROPERTY = "file"

_log = logging.getLogger(__name__)


class FileSource:
    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        instance_id: int,
        parallelism: int,
        clock: Clock,
    ) -> None:
        self._directory = Path(setting(config, "inputDirectory", str))
        if not self._directory.is_dir():
            raise InvalidConnectorConfig(f"inputDirectory: {self._directory} is not a directory")
        try:
            self._filter = re.compile(setting(config, "fileFilter", str, "[^.].*"))
        except re.error as exc:
            raise InvalidConnectorConfig(f"fileFilter: not a regular expression: {exc}") from None
        self._suffix = setting(config, "processedFileSuffix", str, ".processed")
        if not self._suffix or "/" in self._suffix:
            raise InvalidConnectorConfig("processedFileSuffix: must be a non-empty name suffix")
        self._poll_ms = setting(config, "pollingIntervalMs", int, 1_000)
        if not 1 <= self._poll_ms <= 3_600_000:
            raise InvalidConnectorConfig("pollingIntervalMs: must be 1..3600000")
        self._instance_id = instance_id
        self._parallelism = parallelism
        self._clock = clock
        self._queue: deque[SourceRecord] = deque()
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._claimed: set[str] = set()
        """Files read (or being read) whose lines are not all stored yet."""

    async def read(self) -> SourceRecord:
        while not self._queue:
            await self._fill()
        return self._queue.popleft()

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    async def _fill(self) -> None:
        if self._file is None:
            path = await self._next_file()
            if path is None:
                await self._clock.sleep(self._poll_ms / 1000)
                return
            try:
                self._file = await asyncio.to_thread(path.open, "rb")
            except OSError as exc:  # removed meanwhile, or unreadable: not ours to fix
                _log.warning("file source: cannot read %s: %s", path, exc)
                return
            self._path = path
            self._claimed.add(path.name)
        assert self._path is not None
        path, file = self._path, self._file
        lines, at_end = await asyncio.to_thread(_read_lines, file)
        properties = {FILE_NAME_PROPERTY: path.name}
        records = [SourceRecord(line, properties=properties) for line in lines]
        if at_end:
            file.close()
            self._file = self._path = None
            if records:
                last = records[-1]
                records[-1] = SourceRecord(
                    last.value, properties=properties, on_stored=lambda: self._done(path)
                )
            else:
                self._done(path)
        self._queue.extend(records)

    def _done(self, path: Path) -> None:
        try:
            path.rename(path.with_name(path.name + self._suffix))
        except OSError as exc:
            _log.warning("file source: cannot mark %s processed: %s", path, exc)
        self._claimed.discard(path.name)

    async def _next_file(self) -> Path | None:
        return await asyncio.to_thread(self._scan)

    def _scan(self) -> Path | None:
        candidates: list[tuple[int, str]] = []
        try:
            entries = list(os.scandir(self._directory))
        except OSError as exc:
            _log.warning("file source: cannot list %s: %s", self._directory, exc)
            return None
        for entry in entries:
            name = entry.name
            if (
                name.endswith(self._suffix)
                or name in self._claimed
                or not self._filter.fullmatch(name)
                or zlib.crc32(name.encode()) % self._parallelism != self._instance_id
            ):
                continue
            try:
                if not entry.is_file():
                    continue
                candidates.append((entry.stat().st_mtime_ns, name))
            except OSError:
                continue
        if not candidates:
            return None
        return self._directory / min(candidates)[1]


def _read_lines(file: BinaryIO) -> tuple[list[bytes], bool]:
    """Up to :data:`LINES_PER_READ_MAX` non-empty lines, and whether the file ended."""
    lines: list[bytes] = []
    while len(lines) < LINES_PER_READ_MAX:
        line = file.readline(LINE_BYTES_MAX)
        if not line:
            return lines, True
        line = line.rstrip(b"\r\n")
        if line:
            lines.append(line)
    at_end = file.tell() >= os.fstat(file.fileno()).st_size
    return lines, at_end
