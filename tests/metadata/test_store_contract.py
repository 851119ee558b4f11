"""The metadata store contract, run against every backend (see conftest ``backend``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from magnetar.metadata import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    VALUE_SIZE_MAX_BYTES,
    BadVersion,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    InvalidPath,
    MetadataStore,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
    NotFound,
    Notification,
    SessionExpired,
    SessionState,
    SetOp,
    ValueTooLarge,
)

OpenStore = Callable[[], Awaitable[MetadataStore]]

WAIT_S = 10.0


async def wait_for_event(
    stream: AsyncIterator[Notification], predicate: Callable[[Notification], bool]
) -> Notification:
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            if predicate(event):
                return event
    raise AssertionError("stream ended before the expected notification")


async def wait_for_all(stream: AsyncIterator[Notification], *expected: Notification) -> None:
    """Wait until every expected notification was seen, in any order (ZooKeeper watches
    do not order a CREATED against its parent's CHILDREN_CHANGED)."""
    missing = set(expected)
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            missing.discard(event)
            if not missing:
                return
    raise AssertionError(f"stream ended; never saw {missing}")


async def test_put_get_roundtrip_and_versions(store: MetadataStore) -> None:
    stat = await store.put("/a/b", b"one")
    assert stat.version == 0 and stat.ephemeral_owner is None
    got = await store.get("/a/b")
    assert got.value == b"one" and got.stat.version == 0
    assert got.stat.created_ms > 0 and got.stat.modified_ms >= got.stat.created_ms
    stat = await store.put("/a/b", b"two")
    assert stat.version == 1
    assert (await store.get("/a/b")).value == b"two"
    # the missing parent was created, persistent and empty
    parent = await store.get("/a")
    assert parent.value == b"" and parent.stat.children_count == 1


async def test_put_must_not_exist(store: MetadataStore) -> None:
    await store.put("/x", b"1", MUST_NOT_EXIST)
    with pytest.raises(NodeExists):
        await store.put("/x", b"2", MUST_NOT_EXIST)
    assert (await store.get("/x")).value == b"1"


async def test_put_compare_and_set(store: MetadataStore) -> None:
    await store.put("/cas", b"v0", MUST_NOT_EXIST)
    stat = await store.put("/cas", b"v1", 0)
    assert stat.version == 1
    with pytest.raises(BadVersion):
        await store.put("/cas", b"stale", 0)
    assert (await store.get("/cas")).value == b"v1"
    with pytest.raises(NotFound):
        await store.put("/absent", b"x", 0)
    assert await store.exists("/absent") is None


async def test_get_and_children_of_missing_node(store: MetadataStore) -> None:
    with pytest.raises(NotFound):
        await store.get("/nope")
    with pytest.raises(NotFound):
        await store.children("/nope")
    assert await store.exists("/nope") is None


async def test_create_plain_sequential_and_ephemeral(store: MetadataStore) -> None:
    assert await store.create("/c/plain", b"p") == "/c/plain"
    with pytest.raises(NodeExists):
        await store.create("/c/plain", b"again")
    first = await store.create("/c/seq-", b"", sequential=True)
    second = await store.create("/c/seq-", b"", sequential=True)
    assert first.startswith("/c/seq-") and len(first) == len("/c/seq-") + 10
    assert first[-10:].isdigit() and int(second[-10:]) > int(first[-10:])
    eph = await store.create("/c/eph", b"e", ephemeral=True)
    stat = await store.exists(eph)
    assert stat is not None and stat.ephemeral_owner == store.session_id
    with pytest.raises(NoChildrenForEphemerals):
        await store.create("/c/eph/child", b"")
    assert await store.children("/c") == sorted(["plain", "eph", first[3:], second[3:]])


async def test_sequence_numbers_count_only_the_children_created_and_deleted(
    store: MetadataStore,
) -> None:
    # A sequential node is numbered by its parent's count of child changes (ZooKeeper's
    # cversion): a create that fails, alone or in a multi, must not count.
    first = await store.create("/s/seq-", b"", sequential=True)
    await store.create("/s/a", b"")
    with pytest.raises(NodeExists):
        await store.create("/s/a", b"")
    with pytest.raises(BadVersion):
        await store.multi([CreateOp("/s/b", b""), CheckOp("/s/a", 7)])
    await store.create("/s/eph", b"", ephemeral=True)
    with pytest.raises(NoChildrenForEphemerals):
        await store.create("/s/eph/child", b"")
    with pytest.raises(BadVersion):  # nor a delete that fails
        await store.delete("/s/a", 7)
    second = await store.create("/s/seq-", b"", sequential=True)
    assert int(second[-10:]) == int(first[-10:]) + 3  # seq-, a and eph
    assert await store.exists("/s/b") is None
    assert await store.exists("/s/a") is not None


async def test_ephemeral_nodes_end_with_their_session(open_store: OpenStore) -> None:
    owner = await open_store()
    observer = await open_store()
    assert owner.session_id != observer.session_id
    await owner.create("/eph/node", b"mine", ephemeral=True)
    await owner.put("/eph/persistent", b"stays")
    stat = await observer.exists("/eph/node")
    assert stat is not None and stat.ephemeral_owner == owner.session_id
    async with observer.notifications("/eph") as stream:
        await stream.wait_ready()
        await owner.close()
        await wait_for_event(
            stream, lambda e: e.type is EventType.DELETED and e.path == "/eph/node"
        )
    assert await observer.exists("/eph/node") is None
    assert (await observer.get("/eph/persistent")).value == b"stays"
    with pytest.raises(SessionExpired):
        await owner.get("/eph/persistent")


async def test_delete_checks_version_and_emptiness(store: MetadataStore) -> None:
    await store.put("/d/leaf", b"x")
    await store.put("/d/leaf", b"y")
    with pytest.raises(BadVersion):
        await store.delete("/d/leaf", 0)
    with pytest.raises(NotEmpty):
        await store.delete("/d")
    await store.delete("/d/leaf", 1)
    with pytest.raises(NotFound):
        await store.delete("/d/leaf")
    await store.delete("/d", ANY_VERSION)
    assert await store.exists("/d") is None


async def test_delete_recursive(store: MetadataStore) -> None:
    for p in ("/t/a/1", "/t/a/2", "/t/b", "/t2/keep", "/t-sibling/keep"):
        await store.put(p, b"")
    await store.delete_recursive("/t")
    assert await store.exists("/t") is None
    assert await store.exists("/t2/keep") is not None
    assert await store.exists("/t-sibling/keep") is not None
    await store.delete_recursive("/t")  # a missing path is not an error


async def test_children_sorted_names(store: MetadataStore) -> None:
    for name in ("b", "a", "c"):
        await store.put(f"/kids/{name}", b"")
    await store.put("/kids/a/grandchild", b"")
    assert await store.children("/kids") == ["a", "b", "c"]
    assert (await store.exists("/kids")) is not None
    assert (await store.get("/kids")).stat.children_count == 3


async def test_multi_applies_everything(store: MetadataStore) -> None:
    await store.put("/m", b"")
    await store.put("/m/counter", b"0")
    await store.put("/m/old", b"")
    results = await store.multi(
        [
            CheckOp("/m", 0),
            SetOp("/m/counter", b"1", 0),
            CreateOp("/m/new", b"n"),
            CreateOp("/m/seq-", b"", sequential=True),
            DeleteOp("/m/old", 0),
        ]
    )
    assert [r.path for r in results][:3] == ["/m", "/m/counter", "/m/new"]
    assert results[1].stat is not None and results[1].stat.version == 1
    assert results[3].path.startswith("/m/seq-") and len(results[3].path) == len("/m/seq-") + 10
    assert (await store.get("/m/counter")).value == b"1"
    assert await store.exists("/m/old") is None
    assert await store.exists(results[3].path) is not None


@pytest.mark.parametrize(
    ("failing_op", "error", "index"),
    [
        (CheckOp("/m/counter", 7), BadVersion, 2),
        (SetOp("/m/absent", b"", ANY_VERSION), NotFound, 2),
        (CreateOp("/m/counter", b""), NodeExists, 2),
        (DeleteOp("/m"), NotEmpty, 2),
        (CreateOp("/m/no/parent", b""), NotFound, 2),
    ],
)
async def test_failed_multi_changes_nothing(
    store: MetadataStore, failing_op: object, error: type[Exception], index: int
) -> None:
    await store.put("/m/counter", b"0")
    with pytest.raises(error) as caught:
        await store.multi(
            [
                SetOp("/m/counter", b"1", 0),
                CreateOp("/m/created", b"c"),
                failing_op,  # type: ignore[list-item]
                CreateOp("/m/after", b"a"),
            ]
        )
    assert getattr(caught.value, "op_index", None) == index
    got = await store.get("/m/counter")
    assert got.value == b"0" and got.stat.version == 0
    assert await store.exists("/m/created") is None
    assert await store.exists("/m/after") is None
    assert await store.children("/m") == ["counter"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "relative",
        "/trailing/",
        "//double",
        "/a//b",
        "/a/./b",
        "/a/../b",
        "/nul\x00",
        "/ctl\x01",
    ],
)
async def test_invalid_paths_are_refused(store: MetadataStore, bad: str) -> None:
    with pytest.raises(InvalidPath):
        await store.put(bad, b"")
    with pytest.raises(InvalidPath):
        await store.get(bad)
    with pytest.raises(InvalidPath):
        await store.create(bad, b"")
    with pytest.raises(InvalidPath):
        await store.multi([CreateOp("/fine", b""), CreateOp(bad, b"")])
    assert await store.exists("/fine") is None


async def test_root_cannot_be_deleted(store: MetadataStore) -> None:
    with pytest.raises(InvalidPath):
        await store.delete("/")
    with pytest.raises(InvalidPath):
        await store.delete_recursive("/")


async def test_value_size_limit(store: MetadataStore) -> None:
    big = b"x" * VALUE_SIZE_MAX_BYTES
    await store.put("/big", big)
    assert (await store.get("/big")).value == big
    with pytest.raises(ValueTooLarge):
        await store.put("/big", big + b"!")
    with pytest.raises(ValueTooLarge):
        await store.create("/big2", big + b"!")
    with pytest.raises(ValueTooLarge):
        await store.multi([CreateOp("/big3", b""), SetOp("/big", big + b"!")])
    assert await store.exists("/big2") is None and await store.exists("/big3") is None
    assert (await store.get("/big")).stat.version == 0


async def test_notifications_for_each_kind_of_change(open_store: OpenStore) -> None:
    writer = await open_store()
    watcher = await open_store()
    await writer.put("/n", b"")
    async with watcher.notifications("/n") as stream:
        await stream.wait_ready()
        await writer.put("/n/x", b"1")
        await wait_for_all(
            stream,
            Notification(EventType.CREATED, "/n/x"),
            Notification(EventType.CHILDREN_CHANGED, "/n"),
        )
        await writer.put("/n/x", b"2")
        await wait_for_all(stream, Notification(EventType.MODIFIED, "/n/x"))
        await writer.delete("/n/x")
        await wait_for_all(
            stream,
            Notification(EventType.DELETED, "/n/x"),
            Notification(EventType.CHILDREN_CHANGED, "/n"),
        )
        # a node created under a new node is seen too (the watch follows the tree)
        await writer.put("/n/deep/er", b"")
        await wait_for_all(
            stream,
            Notification(EventType.CREATED, "/n/deep"),
            Notification(EventType.CREATED, "/n/deep/er"),
        )


async def test_notifications_respect_prefix(open_store: OpenStore) -> None:
    writer = await open_store()
    watcher = await open_store()
    await writer.put("/p/in", b"")
    await writer.put("/q", b"")
    seen: list[Notification] = []
    async with watcher.notifications("/p") as stream:
        await stream.wait_ready()
        await writer.put("/q/out", b"")
        await writer.put("/p-sibling", b"")
        await writer.put("/p/in", b"changed")
        async with asyncio.timeout(WAIT_S):
            async for event in stream:
                seen.append(event)
                if event == Notification(EventType.MODIFIED, "/p/in"):
                    break
    assert all(e.path == "/p" or e.path.startswith("/p/") for e in seen), seen


async def test_expired_session_refuses_everything(open_store: OpenStore) -> None:
    doomed = await open_store()
    other = await open_store()
    await doomed.create("/s/eph", b"", ephemeral=True)
    states = doomed.session_states()
    async with asyncio.timeout(WAIT_S):
        assert await anext(states) is SessionState.CONNECTED
    await doomed.expire_session()  # type: ignore[attr-defined]
    async with asyncio.timeout(WAIT_S):
        while (state := await anext(states)) is not SessionState.LOST:
            assert state is SessionState.SUSPENDED
    assert doomed.session_state is SessionState.LOST
    for attempt in (
        doomed.get("/s"),
        doomed.put("/s/x", b""),
        doomed.create("/s/y", b"", ephemeral=True),
        doomed.delete("/s"),
        doomed.children("/s"),
        doomed.multi([CreateOp("/s/z", b"")]),
    ):
        with pytest.raises(SessionExpired):
            await attempt
    assert await other.exists("/s/eph") is None
    assert await other.children("/s") == []


async def test_close_is_idempotent_and_ends_streams(store: MetadataStore) -> None:
    stream = store.notifications("/")
    await store.close()
    await store.close()
    async with asyncio.timeout(WAIT_S):
        rest = [e async for e in stream]
    assert all(isinstance(e, Notification) for e in rest)
    with pytest.raises(SessionExpired):
        await store.get("/")
