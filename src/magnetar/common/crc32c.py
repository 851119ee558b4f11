"""CRC-32C (Castagnoli): the checksum of Pulsar's payload frames and of BookKeeper's entries.

:func:`crc32c` is the ``crc32c`` package's C function (hardware-accelerated where the CPU
has it), loaded without running the package's ``__init__``: that reads the package's own
version from its installed metadata through ``importlib.metadata`` and imports its command
line, about 20 ms of a process's start for one function. Where the extension cannot be
loaded on its own (another layout of the package), the package is imported as usual.

Callers import the module (``from magnetar.common import crc32c``) and call
``crc32c.crc32c(data, value)`` as they would the package's.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

EXTENSION = "crc32c._crc32c"


def _extension() -> ModuleType:
    loaded = sys.modules.get(EXTENSION)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("crc32c")  # a top-level name: nothing is imported
    if package is not None and package.submodule_search_locations:
        spec = importlib.machinery.PathFinder.find_spec(
            EXTENSION, list(package.submodule_search_locations)
        )
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            # the package, when something imports it later, takes this one
            sys.modules[EXTENSION] = module
            return module
    import crc32c as package_module

    return package_module


crc32c: Callable[..., int] = _extension().crc32c
"""``crc32c(data, value=0)``: the CRC-32C of ``data`` (any buffer) continuing from ``value``."""
