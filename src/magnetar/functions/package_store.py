"""Uploaded packages (a function's ``.py`` file, zip or wheel), stored in the cluster so any
worker can fetch them: the ``packages`` topic.

A package of ``n`` bytes is written by the leader (the topic's only producer, fenced like
``assignments``) as ``ceil(n / PART_BYTES)`` consecutive messages keyed ``{package_id}#{i}``;
its :class:`~magnetar.functions.function_registry.PackageRef` (in the definition's metadata
record) holds the first part's message id and the number of parts. A worker fetches it with a
reader started at that id (inclusive), checks each part's key, and writes the bytes to its
own disk once (``{work_dir}/packages/{package_id}/{file_name}``).

Bounded: a package larger than ``package_bytes_max`` is refused with
:class:`PackageTooLarge` before anything is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from pathlib import Path

from magnetar.client import Client, MessageId
from magnetar.common.errors import MagnetarError
from magnetar.functions.errors import FunctionsWorkerError, PackageTooLarge
from magnetar.functions.fenced_producer import FencedProducer
from magnetar.functions.function_registry import PackageRef

PART_BYTES = 1024 * 1024
"""Bytes per message of a package (well under the broker's 5 MB message limit)."""
DEFAULT_PACKAGE_BYTES_MAX = 64 * 1024 * 1024
FETCH_PART_TIMEOUT_MS = 30_000


class PackageUnavailable(FunctionsWorkerError):
    """A package could not be read back from the ``packages`` topic."""

    retriable = True


def safe_file_name(name: str) -> str:
    """The upload's base name, without directories; ``package`` when nothing is left."""
    base = os.path.basename(name.replace("\\", "/")).strip()
    return base if base and base not in (".", "..") else "package"


async def write_package(
    producer: FencedProducer, package_id: str, file_name: str, data: bytes, package_bytes_max: int
) -> PackageRef:
    """Write ``data`` as the parts of ``package_id`` through the leader's fenced producer.
    Raises :class:`PackageTooLarge`, and the producer's errors (``NotLeader``,
    ``ProducerFenced``)."""
    if len(data) > package_bytes_max:
        raise PackageTooLarge(
            f"the package is {len(data)} bytes; this worker takes at most {package_bytes_max}"
        )
    parts = max(1, -(-len(data) // PART_BYTES))
    first: MessageId | None = None
    for i in range(parts):
        chunk = data[i * PART_BYTES : (i + 1) * PART_BYTES]
        mid = await producer.send(
            f"{package_id}#{i}", chunk, properties={"part": str(i), "parts": str(parts)}
        )
        if first is None:
            first = mid
    assert first is not None
    return PackageRef(
        package_id, safe_file_name(file_name), len(data), first.serialize().hex(), parts
    )


def package_id_for(fqfn: str, data: bytes, generation: int) -> str:
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"{fqfn.replace('/', '_')}-{generation}-{digest}"


async def fetch_package(client: Client, topic: str, ref: PackageRef, work_dir: Path) -> Path:
    """The package on this worker's disk (fetched once, then reused). Raises
    :class:`PackageUnavailable`."""
    target_dir = work_dir / "packages" / ref.package_id
    target = target_dir / ref.file_name
    if target.is_file() and target.stat().st_size == ref.size_bytes:
        return target
    try:
        start = MessageId.deserialize(bytes.fromhex(ref.message_id))
    except ValueError as exc:
        raise PackageUnavailable(f"package {ref.package_id}: bad message id ({exc})") from None
    parts: list[bytes] = []
    try:
        reader = await client.create_reader(
            topic, start, start_message_id_inclusive=True, subscription_role_prefix="package"
        )
    except MagnetarError as exc:
        raise PackageUnavailable(f"package {ref.package_id}: {exc}") from None
    try:
        for i in range(ref.parts):
            msg = await reader.read_next(FETCH_PART_TIMEOUT_MS)
            if msg.partition_key() != f"{ref.package_id}#{i}":
                raise PackageUnavailable(
                    f"package {ref.package_id}: part {i} is missing from {topic}"
                )
            parts.append(msg.data())
    except MagnetarError as exc:
        if isinstance(exc, PackageUnavailable):
            raise
        raise PackageUnavailable(f"package {ref.package_id}: {exc}") from None
    finally:
        with contextlib.suppress(MagnetarError):
            await reader.close()
    data = b"".join(parts)
    if len(data) != ref.size_bytes:
        raise PackageUnavailable(
            f"package {ref.package_id}: read {len(data)} bytes, expected {ref.size_bytes}"
        )
    await asyncio.to_thread(_write_atomically, target, data)
    return target


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(target)
