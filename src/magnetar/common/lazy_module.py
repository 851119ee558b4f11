"""Modules imported at their first use, for what an idle process need not hold: the
generated protobuf classes and what is derived from them (about 4.5 MB resident, wanted
only once a client or a bookie connection sends a frame)."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any


class LazyModule(ModuleType):
    """Stands for the module ``name`` until an attribute is read: the first read imports
    it (a normal import, its errors raised to that reader), copies its namespace here and
    turns this object into a plain module, so later reads are plain module attribute reads
    (as fast as on the module itself: a module subclass's reads cost ~6x as much). Safe
    from any thread. Attributes the module sets on itself after its import are not seen
    here, so use it for modules that do not (generated code, converter tables)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._lazy_lock = threading.Lock()
        self._lazy_module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:  # only for names not copied yet
        with self._lazy_lock:
            module = self._lazy_module
            if module is None:
                module = importlib.import_module(self.__name__)
                self.__dict__.update(
                    (k, v) for k, v in module.__dict__.items() if not k.startswith("__")
                )
                self._lazy_module = module
                self.__class__ = ModuleType  # type: ignore[assignment]
        return getattr(module, attribute)

    def __repr__(self) -> str:  # once loaded, a plain module's
        return f"<lazy module {self.__name__!r}, not loaded yet>"


def lazy_module(name: str) -> ModuleType:
    """A stand-in for the module ``name`` (absolute), imported at the first attribute read
    (:class:`LazyModule`). Bind it under ``if not TYPE_CHECKING`` beside the real import
    under ``TYPE_CHECKING``, so the type checker sees the module itself."""
    return LazyModule(name)
