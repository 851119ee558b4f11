"""Rack placement of bookies: where it is stored, and how an ensemble is spread over racks.

The configuration is Pulsar's ``BookiesRackConfiguration``, JSON at :data:`RACKS_PATH` in the
metadata store: group → bookie id (``host:port``) → ``{"rack": "/region/rack",
"hostname": "…"}``. ``magnetar admin bookies set-bookie-rack`` writes it
(``POST /admin/v2/bookies/racks-info/<bookie>?group=…``), the ledger client reads it each
time it picks bookies for a new ledger or an ensemble change.

A bookie may also label itself (``magnetar bookie --rack /region/rack``): the label is in its
registration node (:func:`registered_rack`); the configuration set through the admin API
overrides it. Bookies with neither are on :data:`DEFAULT_RACK`. A rack written as ``rack1``
counts as ``/rack1``, as Pulsar's ``BookieRackAffinityMapping`` does. How ensembles are
spread over racks and regions is :mod:`magnetar.ledger.placement`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.common.errors import MagnetarError

RACKS_PATH = "/bookies"
"""Where Pulsar keeps the bookies' rack placement."""
DEFAULT_RACK = "/default-rack"
"""The rack of a bookie with no rack configured (BookKeeper's ``NetworkTopology.DEFAULT_RACK``)."""
DEFAULT_GROUP = "default"
"""The group ``set-bookie-rack`` uses when none is given (Pulsar's)."""
RACK_NAME_BYTES_MAX = 1024
"""Bound on a rack or host name (they are stored in one metadata node with all others)."""


class InvalidRackConfiguration(MagnetarError):
    """The stored rack placement is not the JSON object of groups it must be, or a value
    given for it is not acceptable."""


@dataclass(frozen=True, slots=True)
class BookieRack:
    """One bookie's placement, Pulsar's ``BookieInfo``."""

    rack: str
    hostname: str = ""

    def to_json(self) -> dict[str, str]:
        return {"rack": self.rack, "hostname": self.hostname}


def normalized_rack(rack: str) -> str:
    """``rack`` with a leading ``/``. Raises :class:`InvalidRackConfiguration` for an empty
    or overlong name."""
    rack = rack.strip()
    if not rack or rack == "/":
        raise InvalidRackConfiguration("a rack name must not be empty")
    if len(rack.encode()) > RACK_NAME_BYTES_MAX:
        raise InvalidRackConfiguration(f"a rack name is at most {RACK_NAME_BYTES_MAX} bytes")
    return rack if rack.startswith("/") else "/" + rack


def parse_configuration(value: bytes) -> dict[str, dict[str, Any]]:
    """The stored configuration (``{}`` for an empty node). Raises
    :class:`InvalidRackConfiguration` unless it is a JSON object of group objects."""
    try:
        body = json.loads(value) if value else {}
    except ValueError:
        body = None
    if not isinstance(body, dict) or not all(isinstance(g, dict) for g in body.values()):
        raise InvalidRackConfiguration(
            f"the rack placement at {RACKS_PATH} is not a JSON object of groups"
        )
    return body


def racks_of(configuration: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Bookie id → rack, over every group (a bookie in several groups: the first group's,
    in name order). Entries without a usable rack are left out (their bookies are on
    :data:`DEFAULT_RACK`)."""
    racks: dict[str, str] = {}
    for group in sorted(configuration):
        for bookie, info in configuration[group].items():
            if bookie in racks or not isinstance(info, dict):
                continue
            rack = info.get("rack")
            if isinstance(rack, str):
                try:
                    racks[bookie] = normalized_rack(rack)
                except InvalidRackConfiguration:
                    continue
    return racks


def registered_rack(registration: bytes) -> str | None:
    """The rack a bookie labelled itself with, from its registration node's value (JSON
    with ``"rack"``); ``None`` when it has none or the value is not usable."""
    try:
        body = json.loads(registration) if registration else None
    except ValueError:
        return None
    rack = body.get("rack") if isinstance(body, dict) else None
    if not isinstance(rack, str):
        return None
    try:
        return normalized_rack(rack)
    except InvalidRackConfiguration:
        return None
