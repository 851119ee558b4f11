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


async def test_an_admin_set_rack_overrides_the_bookies_own_label() -> None:
    from magnetar.bookie_protocol.layout import AVAILABLE_PATH, READONLY_PATH
    from magnetar.ledger import LedgerClient
    from magnetar.ledger.racks import RACKS_PATH
    from magnetar.metadata import connect

    store = await connect("memory:")
    client = LedgerClient(store)
    try:
        for path, rack in (
            (f"{AVAILABLE_PATH}/a:1", "/east/r1"),
            (f"{AVAILABLE_PATH}/b:1", "/east/r2"),
            (f"{READONLY_PATH}/c:1", "west/r1"),
        ):
            await store.create(path, b'{"rack": "%s"}' % rack.encode(), ephemeral=True)
        await store.create(f"{AVAILABLE_PATH}/d:1", b"{}", ephemeral=True)
        await store.create(RACKS_PATH, b'{"default": {"b:1": {"rack": "/west/r9"}}}')
        assert await client.bookie_racks(["a:1", "b:1", "c:1", "d:1", "gone:1"]) == {
            "a:1": "/east/r1",
            "b:1": "/west/r9",  # the admin's
            "c:1": "/west/r1",  # read-only: its label still counts
        }
    finally:
        await client.close()
        await store.close()


async def test_new_ensembles_follow_the_registrations_and_racks_through_watched_caches() -> None:
    """A new ledger's ensemble comes from watched caches of the registrations and the rack
    placement: a bookie registered after they started is used, the admin's placement and a
    bookie's leaving apply once notified."""
    from magnetar.bookie_protocol.layout import AVAILABLE_PATH
    from magnetar.ledger import LedgerClient
    from magnetar.ledger.errors import NotEnoughBookies
    from magnetar.ledger.racks import RACKS_PATH
    from magnetar.metadata import connect
    from magnetar.testing import wait_until_async

    store = await connect("memory:")
    client = LedgerClient(store)
    try:
        await store.create(f"{AVAILABLE_PATH}/a:1", b'{"rack": "/r1"}', ephemeral=True)
        assert await client.choose_ensemble([None], 1, cached=True) == (["a:1"], {"a:1": "/r1"})
        await store.create(f"{AVAILABLE_PATH}/b:1", b'{"rack": "/r2"}', ephemeral=True)
        chosen, rack_of = await client.choose_ensemble([None, None], 2, cached=True)
        assert sorted(chosen) == ["a:1", "b:1"]
        assert rack_of == {"a:1": "/r1", "b:1": "/r2"}
        await store.create(RACKS_PATH, b'{"default": {"a:1": {"rack": "/r9"}}}')

        async def placed() -> bool:
            _, got = await client.choose_ensemble([None, None], 2, cached=True)
            return got == {"a:1": "/r9", "b:1": "/r2"}

        await wait_until_async(placed, what="the admin's rack applied")
        await store.delete(f"{AVAILABLE_PATH}/b:1")
        with pytest.raises(NotEnoughBookies):
            await client.choose_ensemble([None, None], 2, cached=True)
    finally:
        await client.close()
        await store.close()


async def test_ledger_ids_are_unique_and_their_nodes_go_with_the_next_id() -> None:
    """Ids from sequential nodes: unique across clients, increasing per client; a client
    deletes the nodes of the ids it took in the transaction of its next one, and the last
    at close, so the id nodes do not pile up."""
    import asyncio

    from magnetar.bookie_protocol.layout import IDGEN_PATH
    from magnetar.ledger import LedgerClient
    from magnetar.metadata import connect

    store = await connect("memory:")
    clients = [LedgerClient(store), LedgerClient(store)]
    try:
        ids = await asyncio.gather(*(c._new_ledger_id() for c in clients for _ in range(20)))
        assert len(set(ids)) == 40
        more = [await clients[0]._new_ledger_id() for _ in range(3)]
        assert more == sorted(more) and min(more) > max(ids)
        assert len(await store.children(IDGEN_PATH)) <= 2 + 20  # each client's last batch
    finally:
        for c in clients:
            await c.close()
    assert await store.children(IDGEN_PATH) == []
    await store.close()
