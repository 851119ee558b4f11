"""A function's state (counters and values) as records on a compacted *state topic*: the
sans-IO core. :mod:`magnetar.functions.state_topic` moves its records to and from the broker.

Why a topic: state must survive the worker (a rescheduled instance, on another worker, sees
it), so it lives in the cluster, not on a worker's disk. Every instance of a function reads
the function's state topic to its end before it processes a message and applies what it
reads here; what ``process`` writes is buffered here and published as **one batch** (one
entry, so stored all or nothing) once ``process`` returned.

Records (message key = record key, value = JSON; an empty value deletes the key, so
compaction keeps one record per key):

* ``v/<key>`` — ``{"v": "<base64>"}``: a value from ``put_state``; last writer wins.
* ``c/<key>/<instance id>`` — ``{"c": n}``: instance ``<instance id>``'s contribution to
  counter ``<key>``, an absolute number. ``get_counter`` is the sum of every instance's
  contribution, so instances that count the same key in parallel never overwrite each
  other (a grow-and-shrink counter made of one register per writer).
* ``p/<input topic>`` — ``{"p": [ledger, entry, batch index]}``: (effectively-once) the last input
  message whose effects are stored, per input topic or partition. Written in the same
  batch as the state that message produced.

Values are absolute, so applying a record twice changes nothing.

Read and written from outside (REST ``…/state/{key}``, ``admin functions querystate|putstate``)
through :meth:`StateStore.lookup` and :meth:`StateStore.put_state` on a store that read the
topic: a value put from outside is a ``v/<key>`` record like an instance's, so the
instances see it at their next catch-up.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

STATE_KEY_BYTES_MAX = 1_024
"""The longest state key (UTF-8 bytes)."""
STATE_VALUE_BYTES_MAX = 64 * 1024
"""The largest value ``put_state`` accepts."""
STATE_WRITES_PER_MESSAGE_MAX = 500
"""State keys one ``process`` call may write: its writes go out as one batch."""

_VALUE = "v/"
_COUNTER = "c/"
_POSITION = "p/"


class StateError(ValueError):
    """A state call the store refuses (key or value too large, too many writes)."""


@dataclass(frozen=True, slots=True)
class StateRecord:
    """One record for the state topic: ``payload`` empty deletes ``key``."""

    key: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class StateEntry:
    """What key ``key`` holds, as Pulsar's ``FunctionState`` tells it: a counter's sum
    (``number``) or a value (``value``), never both. ``version`` counts the records of the key
    this store applied, minus one (0 after the first write); compaction keeps the last
    record per record key, so it restarts lower after a compaction."""

    key: str
    number: int | None
    value: bytes | None
    version: int


def state_topic_name(tenant: str, namespace: str, name: str) -> str:
    """The state topic of function ``tenant/namespace/name``."""
    return f"persistent://{tenant}/{namespace}/__state__{name}"


class StateStore:
    """The state as one instance sees it: what it read from the state topic, plus the
    writes of the ``process`` call in progress (visible to that call at once).

    Not thread-safe by itself: the instance calls the read/write methods from the thread
    that runs ``process`` and :meth:`apply`/:meth:`take_writes` between calls only.
    """

    def __init__(self, instance_id: int) -> None:
        self._instance_id = instance_id
        self._values: dict[str, bytes] = {}
        self._counters: dict[str, dict[int, int]] = {}
        self._positions: dict[str, tuple[int, int, int]] = {}
        self._pending: dict[str, bytes] = {}
        self._versions: dict[str, int] = {}
        self.records_applied = 0

    # ------------------------------------------------------------ reading the topic

    def apply(self, key: str, payload: bytes) -> None:
        """Apply one record read from the state topic. Records of unknown shape are ignored
        (a newer writer's), never raised: reading state must not stop an instance."""
        self.records_applied += 1
        try:
            doc = json.loads(payload) if payload else None
        except ValueError:
            return
        if key.startswith(_VALUE):
            name = key[len(_VALUE) :]
            self._versions[name] = self._versions.get(name, -1) + 1
            if doc is None:
                self._values.pop(name, None)
            elif isinstance(doc, dict) and isinstance(doc.get("v"), str):
                self._values[name] = base64.b64decode(doc["v"])
        elif key.startswith(_COUNTER):
            name, _, writer = key[len(_COUNTER) :].rpartition("/")
            if not writer.isdigit():
                return
            self._versions[name] = self._versions.get(name, -1) + 1
            if doc is None:
                self._counters.get(name, {}).pop(int(writer), None)
            elif isinstance(doc, dict) and isinstance(doc.get("c"), int):
                self._counters.setdefault(name, {})[int(writer)] = doc["c"]
        elif (
            key.startswith(_POSITION)
            and isinstance(doc, dict)
            and isinstance(doc.get("p"), list)
            and len(doc["p"]) == 3
        ):
            ledger, entry, batch = doc["p"]
            self._positions[key[len(_POSITION) :]] = (int(ledger), int(entry), int(batch))

    # ------------------------------------------------------------ the Context's calls

    def get_state(self, key: str) -> bytes | None:
        record = _VALUE + _check_key(key)
        if record in self._pending:
            payload = self._pending[record]
            return base64.b64decode(json.loads(payload)["v"]) if payload else None
        return self._values.get(key)

    def put_state(self, key: str, value: bytes) -> None:
        if len(value) > STATE_VALUE_BYTES_MAX:
            raise StateError(f"state value of {len(value)} bytes exceeds {STATE_VALUE_BYTES_MAX}")
        doc = {"v": base64.b64encode(value).decode("ascii")}
        self._write(_VALUE + _check_key(key), json.dumps(doc).encode())

    def del_state(self, key: str) -> None:
        self._write(_VALUE + _check_key(key), b"")

    def get_counter(self, key: str) -> int:
        _check_key(key)
        return sum(self._contributions(key).values())

    def incr_counter(self, key: str, amount: int) -> None:
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise StateError(f"counter amount must be an int, got {type(amount).__name__}")
        mine = self._contributions(_check_key(key)).get(self._instance_id, 0) + amount
        self._write(self._counter_key(key), json.dumps({"c": mine}).encode())

    def del_counter(self, key: str) -> None:
        """Deletes every instance's contribution to counter ``key``."""
        for writer in self._contributions(_check_key(key)):
            self._write(f"{_COUNTER}{key}/{writer}", b"")

    def lookup(self, key: str) -> StateEntry | None:
        """What ``key`` holds as read from the topic (None: nothing). A key that is both a
        counter and a value (a function that used it both ways) answers the counter."""
        _check_key(key)
        version = self._versions.get(key, 0)
        if self._counters.get(key):
            return StateEntry(key, sum(self._counters[key].values()), None, version)
        value = self._values.get(key)
        if value is not None:
            return StateEntry(key, None, value, version)
        return None

    # ------------------------------------------------------------ effectively-once

    def position(self, input_topic: str) -> tuple[int, int, int] | None:
        """The last input message of ``input_topic`` whose effects are stored."""
        return self._positions.get(input_topic)

    def record_position(self, input_topic: str, position: tuple[int, int, int]) -> None:
        """``position`` = ``(ledger_id, entry_id, batch_index)``."""
        self._write(_POSITION + input_topic, json.dumps({"p": list(position)}).encode())

    # ------------------------------------------------------------ the call's writes

    def take_writes(self) -> list[StateRecord]:
        """The writes of the call that just returned, in order, and apply them locally (the
        caller publishes them). Clears the buffer."""
        out = [StateRecord(k, v) for k, v in self._pending.items()]
        self._pending.clear()
        for record in out:
            self.apply(record.key, record.payload)
            self.records_applied -= 1
        return out

    def discard_writes(self) -> None:
        """Forget the writes of a call that failed: a raising ``process`` changes no state."""
        self._pending.clear()

    def _write(self, record_key: str, payload: bytes) -> None:
        if record_key not in self._pending and len(self._pending) >= STATE_WRITES_PER_MESSAGE_MAX:
            raise StateError(
                f"more than {STATE_WRITES_PER_MESSAGE_MAX} state keys written by one message"
            )
        self._pending[record_key] = payload

    def _counter_key(self, key: str) -> str:
        return f"{_COUNTER}{key}/{self._instance_id}"

    def _contributions(self, key: str) -> dict[int, int]:
        merged = dict(self._counters.get(key, {}))
        prefix = f"{_COUNTER}{key}/"
        for record_key, payload in self._pending.items():
            if record_key.startswith(prefix) and record_key[len(prefix) :].isdigit():
                writer = int(record_key[len(prefix) :])
                if payload:
                    merged[writer] = json.loads(payload)["c"]
                else:
                    merged.pop(writer, None)
        return merged


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise StateError("a state key must be a non-empty str")
    if len(key.encode()) > STATE_KEY_BYTES_MAX:
        raise StateError(f"state key longer than {STATE_KEY_BYTES_MAX} bytes")
    return key
