"""Function, source and sink definitions as records of the ``metadata`` topic, and the
in-memory map every worker keeps of them (sans-IO: records in, changes out).

Record layout (one message per change, key = the fqfn ``tenant/namespace/name``)::

    {"version": 3,                  # 1 on create, +1 on every change of the definition
     "generation": 2,               # +1 on update and restart: instances of an older
                                    # generation are restarted by their worker
     "config": {...},               # FunctionConfig JSON (Pulsar's spelling)
     "package": {"id": "...", "fileName": "wc.py", "sizeBytes": 812,
                 "messageId": "<hex>", "parts": 1} | null,
     "stoppedInstances": [1]}       # instances asked to stop (``functions stop``)

A message with an empty payload is a *tombstone*: the definition was deleted (and the topic's
compaction drops the key). Keys beginning with ``__`` are the leader's markers (see
:data:`MARKER_KEY_PREFIX`), never definitions.

Only the leader writes this topic (a fenced exclusive producer), after checking the change
against this map, so records arrive in one total order and :meth:`FunctionRegistry.apply`
needs no conflict resolution: the last record of a key wins.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.functions.function_config import ComponentKind, FunctionConfig, InvalidFunctionConfig

MARKER_KEY_PREFIX = "__"
"""Keys of leader markers (``__leader__``): written by a new leader to know when it has read
the topic to its end; ignored by every reader."""


class InvalidRecord(ValueError):
    """A metadata record that cannot be read (a foreign writer, or a newer format)."""


@dataclass(frozen=True, slots=True)
class PackageRef:
    """Where a definition's uploaded package is stored on the ``packages`` topic: ``parts``
    consecutive messages from ``message_id`` (a serialized MessageId, hex)."""

    package_id: str
    file_name: str
    size_bytes: int
    message_id: str
    parts: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.package_id,
            "fileName": self.file_name,
            "sizeBytes": self.size_bytes,
            "messageId": self.message_id,
            "parts": self.parts,
        }

    @classmethod
    def from_json(cls, data: Any) -> PackageRef:
        try:
            return cls(
                str(data["id"]),
                str(data["fileName"]),
                int(data["sizeBytes"]),
                str(data["messageId"]),
                int(data["parts"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRecord(f"package reference: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class FunctionRecord:
    """One definition as stored. Immutable: changes make a new record."""

    config: FunctionConfig
    version: int = 1
    generation: int = 1
    package: PackageRef | None = None
    stopped_instances: frozenset[int] = field(default_factory=frozenset)

    @property
    def fqfn(self) -> str:
        return self.config.fqfn

    @property
    def kind(self) -> ComponentKind:
        return self.config.kind

    def instance_keys(self) -> list[str]:
        """``fqfn:0`` .. ``fqfn:{parallelism-1}``."""
        return [f"{self.fqfn}:{i}" for i in range(self.config.parallelism)]

    def to_payload(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "generation": self.generation,
                "config": self.config.to_json(),
                "package": None if self.package is None else self.package.to_json(),
                "stoppedInstances": sorted(self.stopped_instances),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_payload(cls, payload: bytes) -> FunctionRecord:
        """Raises :class:`InvalidRecord`."""
        try:
            data = json.loads(payload)
            config = FunctionConfig.from_json(data["config"])
            package = data.get("package")
            return cls(
                config=config,
                version=int(data["version"]),
                generation=int(data.get("generation", 1)),
                package=None if package is None else PackageRef.from_json(package),
                stopped_instances=frozenset(int(i) for i in data.get("stoppedInstances", ())),
            )
        except (ValueError, KeyError, TypeError, InvalidFunctionConfig) as exc:
            raise InvalidRecord(f"metadata record: {exc}") from None

    def next(self, **changes: Any) -> FunctionRecord:
        """This record changed, with the version counted up."""
        return replace(self, version=self.version + 1, **changes)


class FunctionRegistry:
    """fqfn -> :class:`FunctionRecord`, as the ``metadata`` topic says so far."""

    def __init__(self) -> None:
        self._records: dict[str, FunctionRecord] = {}

    def apply(self, key: str, payload: bytes) -> bool:
        """Apply one record of the topic, in topic order. Returns whether the map changed.
        Raises :class:`InvalidRecord` for a payload that is not a record (the caller logs
        and skips it: one bad record must not stop a worker)."""
        if key.startswith(MARKER_KEY_PREFIX):
            return False
        if not payload:
            return self._records.pop(key, None) is not None
        record = FunctionRecord.from_payload(payload)
        if record.fqfn != key:
            raise InvalidRecord(f"metadata record keyed {key!r} describes {record.fqfn!r}")
        if self._records.get(key) == record:
            return False
        self._records[key] = record
        return True

    def get(self, fqfn: str) -> FunctionRecord | None:
        return self._records.get(fqfn)

    def list(self, tenant: str, namespace: str, kind: ComponentKind) -> list[str]:
        """Names of the namespace's definitions of ``kind``, sorted."""
        return sorted(
            r.config.name
            for r in self._records.values()
            if r.config.tenant == tenant and r.config.namespace == namespace and r.kind is kind
        )

    def __iter__(self) -> Iterator[FunctionRecord]:
        return iter(list(self._records.values()))

    def __len__(self) -> int:
        return len(self._records)
