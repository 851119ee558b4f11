"""The optional C versions of the codec's hottest functions (``_cframe``, built from
``_cframe.c`` when the package is installed on a machine with a C compiler).

Each C function returns the same bytes or values as the pure-Python function it stands in
for (``tests/protocol/test_speedups.py`` compares them on generated inputs), so the codec
binds whichever :data:`CFRAME` allows. Without the compiled module, or with
``MAGNETAR_PURE_PYTHON`` set to a non-empty value when the codec is imported, the
pure-Python functions serve.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_PYTHON_ENV = "MAGNETAR_PURE_PYTHON"


def load() -> ModuleType | None:
    """The compiled ``_cframe`` module, or None (not built, or pure Python asked for)."""
    if os.environ.get(PURE_PYTHON_ENV):
        return None
    try:
        from magnetar.protocol import _cframe
    except ImportError:
        return None
    return _cframe


CFRAME = load()
"""What the codec runs: the compiled module, or None for the pure-Python functions."""
