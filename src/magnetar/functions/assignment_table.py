"""Which worker runs which instance: the ``assignments`` topic as an in-memory map (sans-IO).

Record layout (one message per change, key = the instance key ``tenant/namespace/name:i``)::

    {"workerId": "w2"}

An empty payload is a tombstone (the instance no longer exists). Keys beginning with ``__``
are leader markers (:data:`~magnetar.functions.function_registry.MARKER_KEY_PREFIX`). Only
the leader writes the topic; every worker reads it in order, so the last record of a key wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from magnetar.functions.function_registry import MARKER_KEY_PREFIX, InvalidRecord


def assignment_payload(worker_id: str) -> bytes:
    return json.dumps({"workerId": worker_id}, separators=(",", ":")).encode()


def split_instance_key(key: str) -> tuple[str, int]:
    """``t/ns/f:3`` -> (``t/ns/f``, 3). Raises :class:`InvalidRecord`."""
    fqfn, sep, index = key.rpartition(":")
    if not sep or not index.isdigit() or fqfn.count("/") != 2:
        raise InvalidRecord(f"{key!r} is not an instance key (tenant/namespace/name:index)")
    return fqfn, int(index)


class AssignmentTable:
    """instance key -> worker id, as the ``assignments`` topic says so far."""

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}

    def apply(self, key: str, payload: bytes) -> bool:
        """Apply one record, in topic order; returns whether the map changed. Raises
        :class:`InvalidRecord` for a record that is not an assignment."""
        if key.startswith(MARKER_KEY_PREFIX):
            return False
        split_instance_key(key)
        if not payload:
            return self._owners.pop(key, None) is not None
        try:
            worker_id = json.loads(payload)["workerId"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidRecord(f"assignment record for {key}: {exc!r}") from None
        if not isinstance(worker_id, str) or not worker_id:
            raise InvalidRecord(f"assignment record for {key}: workerId must be a string")
        if self._owners.get(key) == worker_id:
            return False
        self._owners[key] = worker_id
        return True

    def owner(self, instance_key: str) -> str | None:
        return self._owners.get(instance_key)

    def of_worker(self, worker_id: str) -> list[str]:
        """The instance keys assigned to ``worker_id``, sorted."""
        return sorted(k for k, w in self._owners.items() if w == worker_id)

    def snapshot(self) -> Mapping[str, str]:
        """A copy of the whole map (the caller owns it)."""
        return dict(self._owners)
