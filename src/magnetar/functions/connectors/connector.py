"""What a built-in connector is to the instance that runs it.

A **sink** is a callable ``process(value, context)`` like a function's (so the function
instance runs it, with its acknowledgements, retries and dead-letter topic): it returns
once the value is written where it goes, and raises when it could not be, so the input is
negatively acknowledged and comes back (at-least-once).

A **source** is a :class:`Source`: :meth:`Source.read` waits for the next record; the
source instance publishes it and, once the broker stored it and every record read before
it, calls its ``on_stored`` (a file source then marks the file done).

Both are built from the definition's ``userConfig`` (``--source-config``/``--sink-config``)
and raise :class:`InvalidConnectorConfig` naming the setting when it cannot work: the runtime
shows that in the instance's status and does not retry it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from magnetar.functions.function_loader import PackageError

T = TypeVar("T")


class InvalidConnectorConfig(PackageError):
    """A connector's settings cannot work; the message names the setting."""


@dataclass(frozen=True, slots=True)
class SourceRecord:
    value: bytes
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    on_stored: Callable[[], None] | None = None
    """Called (on the instance's loop) once this record and all before it are stored."""


class Source(Protocol):
    async def read(self) -> SourceRecord:
        """The next record, waiting for it as long as it takes (cancellable)."""
        ...

    async def close(self) -> None: ...


def setting(config: Mapping[str, Any], name: str, kind: type[T], default: T | None = None) -> T:
    """``config[name]`` checked to be a ``kind``; ``default`` when absent (None: required)."""
    value = config.get(name)
    if value is None:
        if default is None:
            raise InvalidConnectorConfig(f"{name}: missing")
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise InvalidConnectorConfig(f"{name}: must be a {kind.__name__}, not {value!r}")
    return value
