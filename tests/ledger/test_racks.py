"""The stored rack placement and the racks bookies label themselves with
(:mod:`magnetar.ledger.racks`); how ensembles spread over racks is tested in
``test_placement.py``."""

from __future__ import annotations

import pytest

from magnetar.ledger.racks import (
    DEFAULT_RACK,
    InvalidRackConfiguration,
    normalized_rack,
    parse_configuration,
    racks_of,
    registered_rack,
)


def test_the_stored_configuration_as_pulsar_writes_it() -> None:
    stored = (
        b'{"default": {"127.0.0.1:3181": {"rack": "rack-a", "hostname": "h1"},'
        b' "127.0.0.1:3182": {"rack": "/region/rack-b"}, "127.0.0.1:3183": {}},'
        b' "other": {"127.0.0.1:3181": {"rack": "/elsewhere"}}}'
    )
    assert racks_of(parse_configuration(stored)) == {
        "127.0.0.1:3181": "/rack-a",
        "127.0.0.1:3182": "/region/rack-b",
    }
    assert parse_configuration(b"") == {}
    for bad in (b"[]", b"{", b'{"default": 3}'):
        with pytest.raises(InvalidRackConfiguration):
            parse_configuration(bad)
    for bad_rack in ("", "/", " "):
        with pytest.raises(InvalidRackConfiguration):
            normalized_rack(bad_rack)
    assert DEFAULT_RACK == "/default-rack"


def test_the_rack_a_bookie_registers_with() -> None:
    assert registered_rack(b'{"bookie_id": "h:1", "readonly": false, "rack": "east/r1"}') == (
        "/east/r1"
    )
    for unusable in (b"", b"{", b"[]", b'{"rack": 3}', b'{"rack": "/"}', b'{"bookie_id": "h"}'):
        assert registered_rack(unusable) is None
