"""Where bookies and ledgers live in the metadata store: the paths both the bookies and the
ledger client read and write (BookKeeper's layout under ``/ledgers``).

* ``/ledgers/L<id:010d>`` — one ledger's metadata (:func:`ledger_path`); a bookie
  garbage-collects the ledgers whose node is gone (:func:`ledger_id_of`);
* ``/ledgers/idgen/`` — sequential nodes that hand out ledger ids;
* ``/ledgers/available/<bookie id>`` — a writable bookie (ephemeral);
  ``/ledgers/available/readonly/<bookie id>`` — a read-only one;
* ``/ledgers/cookies/<bookie id>`` — the cookie tying a bookie id to its data directory.
"""

from __future__ import annotations

import re
from typing import Final

LEDGERS_PATH: Final = "/ledgers"
IDGEN_PATH: Final = "/ledgers/idgen"
AVAILABLE_PATH: Final = "/ledgers/available"
READONLY_NAME: Final = "readonly"
READONLY_PATH: Final = f"{AVAILABLE_PATH}/{READONLY_NAME}"
COOKIES_PATH: Final = "/ledgers/cookies"

_LEDGER_NODE: Final = re.compile(r"^L(\d+)$")


def ledger_path(ledger_id: int) -> str:
    return f"{LEDGERS_PATH}/L{ledger_id:010d}"


def ledger_id_of(node_name: str) -> int | None:
    """The ledger id of a child of ``/ledgers`` (``L0000000042`` → 42), or None for the other
    children (``idgen``, ``available``, ...)."""
    m = _LEDGER_NODE.match(node_name)
    return None if m is None else int(m.group(1))
