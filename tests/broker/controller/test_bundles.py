"""Namespace bundles: Pulsar's hash ranges, topic placement and splits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.controller.bundles import (
    BundleId,
    BundleRange,
    InvalidBundle,
    NamespaceBundles,
    default_boundaries,
    topic_hash,
)
from magnetar.common.errors import InvalidTopicName


def naive_crc32(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected, as Guava's Hashing.crc32 and zlib) bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32_check_value() -> None:
    # the standard check value of CRC-32 over "123456789"
    assert naive_crc32(b"123456789") == 0xCBF43926


@given(st.text(max_size=40))
def test_topic_hash_is_crc32_of_utf8_name(local: str) -> None:
    name = f"persistent://public/default/{local}"
    assert topic_hash(name) == naive_crc32(name.encode("utf-8", "replace"))


def test_default_four_bundles_as_pulsar_names_them() -> None:
    ns = NamespaceBundles.default("public/default")
    assert ns.to_names() == [
        "0x00000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    assert [b.name for b in ns.bundles] == [
        "public/default/0x00000000_0x40000000",
        "public/default/0x40000000_0x80000000",
        "public/default/0x80000000_0xc0000000",
        "public/default/0xc0000000_0xffffffff",
    ]
    assert default_boundaries(1) == (0, 0xFFFFFFFF)
    assert default_boundaries(3) == (0, 0x55555555, 0xAAAAAAAA, 0xFFFFFFFF)
    with pytest.raises(InvalidBundle):
        default_boundaries(0)


def test_hash_placement_at_the_edges() -> None:
    ns = NamespaceBundles.default("public/default")
    assert ns.bundle_for_hash(0).range.name == "0x00000000_0x40000000"
    assert ns.bundle_for_hash(0x3FFFFFFF).range.name == "0x00000000_0x40000000"
    assert ns.bundle_for_hash(0x40000000).range.name == "0x40000000_0x80000000"
    # the last bundle is closed at both ends: 0xffffffff is in it
    assert ns.bundle_for_hash(0xFFFFFFFF).range.name == "0xc0000000_0xffffffff"
    assert BundleRange(0xC0000000, 0xFFFFFFFF).contains(0xFFFFFFFF)
    assert not BundleRange(0, 0x40000000).contains(0x40000000)


def test_topic_placement_by_crc32_of_full_name() -> None:
    ns = NamespaceBundles.default("public/default")
    # crc32("persistent://public/default/t") = 0x823cd929; short names are expanded first
    assert topic_hash("persistent://public/default/t") == 0x823CD929
    assert ns.bundle_for_topic("t").range.name == "0x80000000_0xc0000000"
    # a partition hashes by its own name (0x3da51034)
    assert ns.bundle_for_topic("t-partition-0").range.name == "0x00000000_0x40000000"
    with pytest.raises(InvalidBundle):
        ns.bundle_for_topic("persistent://other/ns/t")


@given(st.integers(0, 0xFFFFFFFF))
def test_exactly_one_bundle_contains_each_hash(hash_value: int) -> None:
    ns = NamespaceBundles("t/n", (0, 0x10, 0x80000000, 0x80000001, 0xFFFFFFFF))
    holders = [b for b in ns.bundles if b.range.contains(hash_value)]
    assert holders == [ns.bundle_for_hash(hash_value)]


def test_split_in_the_middle() -> None:
    ns = NamespaceBundles.default("public/default")
    bundle = BundleId.parse("public/default/0x40000000_0x80000000")
    split, (low, high) = ns.split(bundle)
    assert (low.range.name, high.range.name) == (
        "0x40000000_0x60000000",
        "0x60000000_0x80000000",
    )
    assert split.to_names() == [
        "0x00000000",
        "0x40000000",
        "0x60000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    assert not split.contains(bundle) and split.contains(low) and split.contains(high)
    # the last bundle splits too, and its upper half keeps 0xffffffff
    _, (_, top) = ns.split(BundleId.parse("public/default/0xc0000000_0xffffffff"))
    assert top.range.name == "0xdfffffff_0xffffffff"
    with pytest.raises(InvalidBundle, match="not a bundle"):
        split.split(bundle)
    tiny = NamespaceBundles("t/n", (0, 1, 0xFFFFFFFF))
    with pytest.raises(InvalidBundle, match="too small"):
        tiny.split(tiny.bundles[0])


@pytest.mark.parametrize(
    "name",
    ["", "0x1", "0x2_0x1", "zz_0x10", "0x0_0x100000000", "1_2", "0x0_0x10_0x20"],
)
def test_bad_ranges_are_refused(name: str) -> None:
    with pytest.raises(InvalidBundle):
        BundleRange.parse(name)


def test_bad_bundle_names_and_boundaries_are_refused() -> None:
    with pytest.raises(InvalidBundle):
        BundleId.parse("0x00000000_0x40000000")
    with pytest.raises(InvalidTopicName):
        BundleId.parse("a/b/c/0x00000000_0x40000000")
    for boundaries in [(0,), (1, 0xFFFFFFFF), (0, 0xFFFFFFFE), (0, 5, 5, 0xFFFFFFFF)]:
        with pytest.raises(InvalidBundle):
            NamespaceBundles("t/n", boundaries)
    with pytest.raises(InvalidBundle):
        NamespaceBundles.from_names("t/n", ["0x0", "nope"])
