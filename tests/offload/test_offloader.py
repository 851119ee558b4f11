"""The offloader against both backends: a local directory and a real S3-compatible server."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from magnetar.offload.block_format import data_key, index_key
from magnetar.offload.object_store import ObjectStoreError, open_object_store
from magnetar.offload.offloader import BlobStoreOffloader, OffloadedDataError
from magnetar.offload.settings import OffloadDriverConfig


@pytest.fixture(params=["filesystem", "aws-s3"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> OffloadDriverConfig:
    if request.param == "filesystem":
        return OffloadDriverConfig("filesystem", directory=str(tmp_path / "tier"))
    return request.getfixturevalue("s3_config")  # type: ignore[no-any-return]


def _ledger(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 3000)) for _ in range(count)]


class _Reads:
    """A ledger's entries served the way the managed ledger serves them, counting calls."""

    def __init__(self, entries: list[bytes]) -> None:
        self.entries = entries
        self.calls: list[tuple[int, int]] = []

    async def __call__(self, first: int, last: int) -> Sequence[bytes]:
        self.calls.append((first, last))
        return self.entries[first : last + 1]


async def test_a_ledger_reads_back_whole_and_in_any_range(config: OffloadDriverConfig) -> None:
    entries = _ledger(700)
    reads = _Reads(entries)
    offloader = BlobStoreOffloader(open_object_store(config), block_size_max=64 * 1024)
    result = await offloader.offload("u1", 5, len(entries) - 1, reads, b'{"ledger": 5}')
    assert result.entries == 700 and result.blocks > 10
    assert max(last - first + 1 for first, last in reads.calls) <= 100  # read a run at a time
    assert await offloader.is_complete("u1", 5)

    fresh = BlobStoreOffloader(open_object_store(config), block_size_max=64 * 1024)
    assert await fresh.read("u1", 5, 0, 699) == entries
    rng = random.Random(7)
    for _ in range(30):
        first = rng.randrange(700)
        last = rng.randrange(first, 700)
        assert await fresh.read("u1", 5, first, last) == entries[first : last + 1]


async def test_an_empty_ledger_and_a_single_huge_entry_offload(config: OffloadDriverConfig) -> None:
    offloader = BlobStoreOffloader(open_object_store(config), block_size_max=4096)
    await offloader.offload("e", 1, -1, _Reads([]), b"")
    assert await offloader.is_complete("e", 1)
    big = [b"a" * 10, b"b" * 50_000, b"c"]
    await offloader.offload("h", 2, 2, _Reads(big), b"")
    assert await offloader.read("h", 2, 0, 2) == big


async def test_the_block_cache_stays_within_its_bound(config: OffloadDriverConfig) -> None:
    entries = _ledger(400, seed=3)
    offloader = BlobStoreOffloader(
        open_object_store(config), block_size_max=32 * 1024, block_cache_bytes=100 * 1024
    )
    await offloader.offload("c", 9, 399, _Reads(entries), b"")
    for first in range(0, 400, 7):
        assert await offloader.read("c", 9, first, first) == [entries[first]]
        assert offloader._cache.bytes <= 100 * 1024


async def test_missing_or_corrupt_objects_are_errors_naming_the_ledger(
    config: OffloadDriverConfig,
) -> None:
    store = open_object_store(config)
    offloader = BlobStoreOffloader(store, block_size_max=8 * 1024)
    entries = _ledger(50, seed=4)
    await offloader.offload("m", 11, 49, _Reads(entries), b"")
    with pytest.raises(OffloadedDataError, match=r"ledger 11: .*entry 50"):
        await offloader.read("m", 11, 49, 50)

    await store.put(data_key("m", 11), b"\x00" * (await store.size(data_key("m", 11))))
    with pytest.raises(OffloadedDataError, match="ledger 11: corrupt offloaded block"):
        await BlobStoreOffloader(store).read("m", 11, 0, 0)

    await store.delete(index_key("m", 11))
    with pytest.raises(OffloadedDataError, match=r"ledger 11: the offloaded index .* is missing"):
        await BlobStoreOffloader(store).read("m", 11, 0, 0)


async def test_delete_removes_both_objects_and_is_idempotent(config: OffloadDriverConfig) -> None:
    store = open_object_store(config)
    offloader = BlobStoreOffloader(store)
    await offloader.offload("d", 3, 9, _Reads(_ledger(10)), b"")
    assert sorted(await store.keys("d-")) == ["d-ledger-3", "d-ledger-3-index"]
    await offloader.delete("d", 3)
    await offloader.delete("d", 3)
    assert await store.keys("d-") == []
    assert not await offloader.is_complete("d", 3)


async def test_a_read_that_fails_mid_offload_leaves_no_complete_ledger(
    config: OffloadDriverConfig,
) -> None:
    entries = _ledger(300, seed=5)

    async def failing(first: int, last: int) -> Sequence[bytes]:
        if first >= 200:
            raise OSError("bookie gone")
        return entries[first : last + 1]

    offloader = BlobStoreOffloader(open_object_store(config), block_size_max=16 * 1024)
    with pytest.raises(OSError, match="bookie gone"):
        await offloader.offload("f", 4, 299, failing, b"")
    assert not await offloader.is_complete("f", 4)


async def test_an_unreachable_s3_endpoint_is_an_object_store_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    config = OffloadDriverConfig(
        "aws-s3", bucket="b", region="us-east-1", endpoint="http://127.0.0.1:1"
    )
    offloader = BlobStoreOffloader(open_object_store(config))
    with pytest.raises(ObjectStoreError, match="s3://b/u-ledger-1"):
        await offloader.offload("u", 1, 0, _Reads([b"x"]), b"")


def test_credentials_come_from_the_shared_file_when_the_environment_has_none(
    tmp_path: Path,
) -> None:
    from magnetar.offload.object_store import _s3_settings

    creds = tmp_path / "credentials"
    creds.write_text(
        "[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n[other]\naws_access_key_id = OK\n"
    )
    config = OffloadDriverConfig("aws-s3", bucket="b", endpoint="http://127.0.0.1:9")
    s3, client = _s3_settings(config, {"AWS_SHARED_CREDENTIALS_FILE": str(creds)})
    assert s3["access_key_id"] == "AK" and s3["secret_access_key"] == "SK"
    assert client == {"allow_http": True}
    s3, _ = _s3_settings(
        config, {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_PROFILE": "other"}
    )
    assert s3["access_key_id"] == "OK"
    s3, _ = _s3_settings(
        config, {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_ACCESS_KEY_ID": "E"}
    )
    assert "access_key_id" not in s3


def test_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="needs a directory"):
        OffloadDriverConfig("filesystem")
    with pytest.raises(ValueError, match="needs a bucket"):
        OffloadDriverConfig("aws-s3")
    with pytest.raises(ValueError, match="expected one of"):
        OffloadDriverConfig("jclouds")
