"""The optional C versions of the hottest loops: the codec's (``_cframe``, built from
``_cframe.c``) and the bookie's record encoders (``_crecords``, from ``_crecords.c``),
compiled when the package is installed on a machine with a C compiler.

Each C function returns the same bytes or values as the pure-Python function it stands in
for (``tests/protocol/test_speedups.py`` and ``tests/bookie/test_record_speedups.py``
compare them on generated inputs), so callers bind whichever :data:`CFRAME` and
:data:`CRECORDS` allow. Without a compiled module, or with ``MAGNETAR_PURE_PYTHON`` set to a
non-empty value when this module is imported, the pure-Python functions serve.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "MAGNETAR_PURE_PYTHON"


def load(name: str = "magnetar.protocol._cframe") -> ModuleType | None:
    """The compiled module ``name``, or None (not built, or pure Python asked for). A module
    that is there but fails to load (built for another Python, or an import cycle through
    this module) is logged as a warning: the pure-Python code then serves, slower."""
    if os.environ.get(PURE_PYTHON_ENV):
        return None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            log.warning("compiled module %s not loaded: %s", name, exc)
        return None
    except ImportError as exc:
        log.warning("compiled module %s not loaded: %s", name, exc)
        return None


CFRAME = load()
"""What the codec runs: the compiled module, or None for the pure-Python functions."""
CRECORDS = load("magnetar.protocol._crecords")
"""What the journal and the entry log encode records with: the compiled module, or None."""
