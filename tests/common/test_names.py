"""Names (reference §6.1: names `<topic>-partition-<i>`, fully qualified; Pulsar's
``NamedEntity`` and ``TopicName`` rules, plus Magnetar's path-safety rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.common import names
from magnetar.common.errors import (
    InvalidSubscriptionName,
    InvalidTopicName,
    ServerError,
    TopicNameNotAllowed,
)
from magnetar.common.names import (
    LOCAL_NAME_LENGTH_MAX_BYTES,
    NAMED_ENTITY_LENGTH_MAX_CHARS,
    SUBSCRIPTION_NAME_LENGTH_MAX_BYTES,
    NamespaceName,
    TopicDomain,
    TopicName,
    check_subscription_name,
    partition_index_of,
)

ENTITY = st.text(alphabet="abcXYZ019-=:._", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
LOCAL = st.text(
    alphabet=st.characters(blacklist_characters="/", blacklist_categories=["Cs", "Cc"]),
    min_size=1,
    max_size=20,
).filter(lambda s: s.strip() != "" and s not in (".", ".."))


def test_short_forms_expand_to_persistent() -> None:
    assert TopicName.parse("my-topic").full_name == "persistent://public/default/my-topic"
    assert TopicName.parse("t/ns/my-topic").full_name == "persistent://t/ns/my-topic"


def test_full_forms() -> None:
    name = TopicName.parse("non-persistent://t/ns/x")
    assert name.domain is TopicDomain.NON_PERSISTENT
    assert not name.is_persistent
    assert (name.tenant, name.namespace, name.local_name) == ("t", "ns", "x")
    assert str(name.namespace_name) == "t/ns"


def test_partition_names() -> None:
    base = TopicName.parse("persistent://public/default/orders")
    p3 = base.partition(3)
    assert p3.full_name == "persistent://public/default/orders-partition-3"
    assert p3.partition_index == 3 and p3.is_partition
    assert p3.partitioned_topic == base
    assert base.partition_index == -1 and base.partitioned_topic is base
    with pytest.raises(ValueError):
        p3.partition(1)
    with pytest.raises(ValueError):
        base.partition(-1)


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("t-partition-0", 0),
        ("t-partition-12", 12),
        ("t-partition-01", -1),  # non-canonical digits: Java says not a partition
        ("t-partition--1", -1),
        ("t-partition-", -1),
        ("t-partition-x", -1),
        ("t-partition-1-partition-2", 2),  # the last suffix counts
        ("t-partition-2147483648", -1),  # beyond a Java int
        ("t-partition-\u0661", -1),  # non-ASCII digit (ARABIC-INDIC ONE)
        ("plain", -1),
    ],
)
def test_partition_index_rules(name: str, index: int) -> None:
    assert partition_index_of(name) == index


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("a/b", "short topic name"),
        ("a/b/c/d", "short topic name"),
        ("kafka://t/ns/x", "topic domain"),
        ("persistent://t/ns", "expected persistent://"),
        ("persistent://t/ns/a/b", "must not contain '/'"),
        ("persistent://t/ns/   ", "must not be blank"),
        ("persistent:///ns/x", "tenant name: it must not be empty"),
        ("persistent://t//x", "namespace name: it must not be empty"),
        ("persistent://t$/ns/x", "tenant name 't$': characters '$' are not allowed"),
        ("persistent://t/n s/x", "namespace name 'n s': characters ' ' are not allowed"),
        ("persistent://tä/ns/x", "are not allowed"),
    ],
)
def test_invalid_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidTopicName) as info:
        TopicName.parse(name)
    assert fragment in info.value.message
    assert info.value.code is ServerError.InvalidTopicName


def test_parse_remembers_the_names_it_parsed_last_within_its_bound() -> None:
    """A client's lookup, producer and subscription of one topic each parse its name: the
    second parse returns the first one's (immutable) object; invalid names are never
    remembered; the remembered names stay bounded."""
    first = TopicName.parse("persistent://public/default/remembered")
    assert TopicName.parse("persistent://public/default/remembered") is first
    for _ in range(2):
        with pytest.raises(InvalidTopicName):
            TopicName.parse("persistent://public/default/")
    for i in range(names.PARSED_TOPICS_MAX + 1):
        TopicName.parse(f"bound-{i}")
    assert 0 < len(names._parsed_topics) <= names.PARSED_TOPICS_MAX


def test_namespace_names() -> None:
    assert NamespaceName.parse("public/default") == NamespaceName("public", "default")
    for bad in ("public", "a/b/c", "/x", "a/", "a b/c"):
        with pytest.raises(InvalidTopicName):
            NamespaceName.parse(bad)


@given(st.sampled_from(list(TopicDomain)), ENTITY, ENTITY, LOCAL)
def test_round_trip(domain: TopicDomain, tenant: str, ns: str, local: str) -> None:
    full = f"{domain.value}://{tenant}/{ns}/{local}"
    name = TopicName.parse(full)
    assert name.full_name == full
    assert TopicName.parse(name.full_name) == name


@given(ENTITY, ENTITY, LOCAL, st.integers(min_value=0, max_value=2**31 - 1))
def test_partition_round_trip(tenant: str, ns: str, local: str, index: int) -> None:
    base = TopicName.parse(f"persistent://{tenant}/{ns}/{local}")
    if base.is_partition:
        return
    part = base.partition(index)
    assert part.partition_index == index
    assert part.partitioned_topic == base
    assert TopicName.parse(part.full_name) == part


@given(st.text(max_size=30))
def test_parse_never_raises_anything_else(text: str) -> None:
    try:
        name = TopicName.parse(text)
    except InvalidTopicName:
        return
    assert TopicName.parse(name.full_name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("persistent://./ns/x", "tenant name '.': '.' and '..' are reserved"),
        ("persistent://t/../x", "namespace name '..': '.' and '..' are reserved"),
        ("persistent://t/ns/.", "'.' and '..' are reserved"),
        ("persistent://t/ns/..", "'.' and '..' are reserved"),
        ("persistent://t/ns/..-partition-0", "'.' and '..' are reserved"),
        ("persistent://t/ns/a\x00b", "control characters"),
        ("persistent://t/ns/a\rb", "control characters"),
        ("persistent://t/ns/a\x7fb", "control characters"),
        ("persistent://t/ns/x\udcffy", "not valid UTF-8"),
        ("persistent://t/ns/" + "é" * (LOCAL_NAME_LENGTH_MAX_BYTES // 2 + 1), "longer than"),
        ("persistent://" + "t" * (NAMED_ENTITY_LENGTH_MAX_CHARS + 1) + "/ns/x", "longer than"),
    ],
)
def test_names_magnetar_refuses(name: str, fragment: str) -> None:
    """Names Pulsar's rules let through but that cannot be metadata-path segments: refused
    with NotAllowedError, which the official clients do not retry."""
    with pytest.raises(TopicNameNotAllowed) as info:
        TopicName.parse(name)
    assert fragment in info.value.message
    assert info.value.code is ServerError.NotAllowedError
    info.value.message.encode()  # the message itself is always encodable


def test_longest_names_are_accepted() -> None:
    tenant = "t" * NAMED_ENTITY_LENGTH_MAX_CHARS
    local = "é" * (LOCAL_NAME_LENGTH_MAX_BYTES // 2)
    name = TopicName.parse(f"persistent://{tenant}/{tenant}/{local}")
    # a partition of the longest base name is still a valid name
    assert TopicName.parse(name.partition(2**31 - 1).full_name).partition_index == 2**31 - 1
    assert check_subscription_name("s" * SUBSCRIPTION_NAME_LENGTH_MAX_BYTES)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "Empty subscription name"),
        ("  ", "Empty subscription name"),
        (".", "reserved"),
        ("..", "reserved"),
        ("a\nb", "control characters"),
        ("s\udcffb", "not valid UTF-8"),
        ("s" * (SUBSCRIPTION_NAME_LENGTH_MAX_BYTES + 1), "longer than"),
    ],
)
def test_invalid_subscription_names(name: str, fragment: str) -> None:
    with pytest.raises(InvalidSubscriptionName) as info:
        check_subscription_name(name)
    assert fragment in info.value.message
    assert info.value.code is ServerError.NotAllowedError


@pytest.mark.parametrize("name", ["sub", "my sub", "ünïcode", "a.b", "...", "reader-1b2c"])
def test_valid_subscription_names(name: str) -> None:
    assert check_subscription_name(name) == name


def test_every_path_derived_from_the_longest_names_is_a_legal_metadata_path() -> None:
    """The length bounds exist so that any accepted name maps to legal metadata paths: '%'
    quotes to three characters per byte, the worst case."""
    from magnetar.broker.policies import topic_path
    from magnetar.broker.service import managed_ledger_name, partitioned_path
    from magnetar.broker.topic import DEDUP_ROOT, TOPIC_EPOCH_ROOT
    from magnetar.managed_ledger.metadata_layout import cursor_path, ledger_path
    from magnetar.metadata import path as paths

    entity = "t" * NAMED_ENTITY_LENGTH_MAX_CHARS
    base = TopicName.parse(
        f"non-persistent://{entity}/{entity}/" + "%" * LOCAL_NAME_LENGTH_MAX_BYTES
    )
    subscription = check_subscription_name("%" * SUBSCRIPTION_NAME_LENGTH_MAX_BYTES)
    for topic in (base, base.partition(2**31 - 1)):
        ml = managed_ledger_name(topic)
        for path in (
            cursor_path(ml, subscription),
            ledger_path(ml),
            f"{DEDUP_ROOT}/{ml}",
            f"{TOPIC_EPOCH_ROOT}/{ml}",
            partitioned_path(topic),
            topic_path(topic),
        ):
            assert paths.validate(path) == path
