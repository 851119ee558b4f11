"""Names of tenants, namespaces, topics and subscriptions, validated in one place.

Every entry point (binary protocol, admin REST, client, Spark, CLI) parses names through
this module, so a name accepted anywhere is accepted everywhere, and every accepted name
maps to legal metadata-store paths.

Accepted topic forms (reference §6.1; Java ``TopicName.get``)::

    persistent://tenant/namespace/topic       fully qualified
    non-persistent://tenant/namespace/topic   fully qualified, non-persistent domain
    tenant/namespace/topic                    short form -> persistent://tenant/namespace/topic
    topic                                     short form -> persistent://public/default/topic

A partition of a partitioned topic is the topic whose local name ends in
``-partition-<i>``, with ``<i>`` a canonical non-negative decimal (Java
``TopicName.getPartitionIndex``: ``-partition-01`` and ``-partition--1`` are *not*
partitions, they are ordinary local names).

Rules. Every failure raises :class:`~magnetar.common.errors.InvalidTopicName` (topics,
tenants, namespaces, clusters; wire code ``InvalidTopicName``, HTTP 400) or
:class:`~magnetar.common.errors.InvalidSubscriptionName` (wire ``NotAllowedError``), with a
one-line message naming the offending part. Pulsar's own rules:

* tenant, namespace and cluster names ("named entities") are non-empty and match Pulsar's
  ``NamedEntity`` pattern ``^[-=:.\\w]*$`` with Java's ASCII ``\\w``, i.e. letters, digits
  and ``- = : . _``;
* a topic's local name is not blank (Java ``StringUtils.isBlank``) and does not contain ``/``;
* a subscription name is not blank (Pulsar's broker refuses a blank one with
  "Empty subscription name");
* the domain is ``persistent`` or ``non-persistent``.

Magnetar's additions, because each of these names becomes a metadata-store path segment
(Pulsar reaches the same names and then fails inside ZooKeeper with an internal error).
For topics they raise :class:`~magnetar.common.errors.TopicNameNotAllowed` (a subclass of
``InvalidTopicName`` answered with wire code ``NotAllowedError``, which the official clients
do not retry):

* no name may be ``.`` or ``..`` (a path segment that means "this" or "parent");
* tenant, namespace and cluster names are at most :data:`NAMED_ENTITY_LENGTH_MAX_CHARS`
  characters;
* local topic names and subscription names hold no control characters (U+0000-U+001F,
  U+007F) and are valid Unicode text: a name that arrived as bytes that are not UTF-8
  (decoded with ``surrogateescape`` by :mod:`magnetar.protocol`) is refused;
* a local topic name (without its ``-partition-<i>`` suffix) and a subscription name are at
  most :data:`LOCAL_NAME_LENGTH_MAX_BYTES` and :data:`SUBSCRIPTION_NAME_LENGTH_MAX_BYTES`
  bytes of UTF-8, which keeps the longest derived path (a cursor, URL-quoted) under the
  metadata store's 4,096-character limit.

Deliberate difference from Java: legacy V1 names carrying a cluster segment
(``persistent://tenant/cluster/namespace/topic``) are rejected; Pulsar 4 clients never
send them.
"""

from __future__ import annotations

import enum
import re
import sys

from magnetar.common.errors import InvalidSubscriptionName, InvalidTopicName, TopicNameNotAllowed
from magnetar.common.frozen_struct import frozen_struct

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"

NAMED_ENTITY_LENGTH_MAX_CHARS = 255
"""Longest tenant, namespace or cluster name."""
LOCAL_NAME_LENGTH_MAX_BYTES = 512
"""Longest local topic name (UTF-8 bytes), not counting a ``-partition-<i>`` suffix."""
SUBSCRIPTION_NAME_LENGTH_MAX_BYTES = 512
"""Longest subscription name (UTF-8 bytes)."""

# Java NamedEntity: "^[-=:.\\w]*$" where \w is ASCII-only in Java regexes.
_NAMED_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_DOT_SEGMENTS = (".", "..")
_JAVA_INT_MAX = 2**31 - 1


def _shown(value: str, limit_chars: int = 80) -> str:
    """``value`` quoted and escaped for an error message (control characters, bytes that
    were not UTF-8), cut to ``limit_chars``."""
    text = repr(value[:limit_chars])
    return text + ("..." if len(value) > limit_chars else "")


class TopicDomain(enum.Enum):
    """The scheme of a topic name."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"

    @classmethod
    def parse(cls, value: str) -> TopicDomain:
        for domain in cls:
            if domain.value == value:
                return domain
        raise InvalidTopicName(
            f"Invalid topic domain: {_shown(value)} (expected 'persistent' or 'non-persistent')"
        )


def check_named_entity(kind: str, value: str) -> str:
    """Check a tenant, namespace or cluster name (``kind`` names which, for the message);
    returns ``value``. Raises :class:`InvalidTopicName`."""
    if not value:
        raise InvalidTopicName(f"Invalid {kind} name: it must not be empty")
    if len(value) > NAMED_ENTITY_LENGTH_MAX_CHARS:
        raise TopicNameNotAllowed(
            f"Invalid {kind} name {_shown(value)}: longer than "
            f"{NAMED_ENTITY_LENGTH_MAX_CHARS} characters"
        )
    if _NAMED_ENTITY.fullmatch(value) is None:
        bad = "".join(sorted({ch for ch in value if _NAMED_ENTITY.fullmatch(ch) is None}))
        raise InvalidTopicName(
            f"Invalid {kind} name {_shown(value)}: characters {_shown(bad)} are not allowed; "
            "allowed are letters, digits and - = : . _"
        )
    if value in _DOT_SEGMENTS:
        raise TopicNameNotAllowed(f"Invalid {kind} name {_shown(value)}: '.' and '..' are reserved")
    return value


def _text_problem(value: str) -> str | None:
    """Why ``value`` cannot be a local topic or subscription name's text, or None."""
    if _SURROGATE.search(value) is not None:
        return "it is not valid UTF-8"
    if _CONTROL.search(value) is not None:
        return "it contains control characters"
    if value in _DOT_SEGMENTS:
        return "'.' and '..' are reserved"
    return None


def _utf8_length(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def check_subscription_name(name: str) -> str:
    """Check a subscription name; returns it. Raises :class:`InvalidSubscriptionName`."""
    if not name.strip():
        raise InvalidSubscriptionName("Empty subscription name")
    problem = _text_problem(name)
    if problem is None and _utf8_length(name) > SUBSCRIPTION_NAME_LENGTH_MAX_BYTES:
        problem = f"longer than {SUBSCRIPTION_NAME_LENGTH_MAX_BYTES} bytes"
    if problem is not None:
        raise InvalidSubscriptionName(f"Invalid subscription name {_shown(name)}: {problem}")
    return name


@frozen_struct(kw_only=False)
class NamespaceName:
    """``tenant/namespace``. Construct with :meth:`parse` (or :meth:`of`) to validate."""

    tenant: str
    namespace: str

    @classmethod
    def of(cls, tenant: str, namespace: str) -> NamespaceName:
        """Raises :class:`InvalidTopicName` when either part is invalid."""
        check_named_entity("tenant", tenant)
        check_named_entity("namespace", namespace)
        return cls(tenant, namespace)

    @classmethod
    def parse(cls, name: str) -> NamespaceName:
        """Parse ``tenant/namespace``; raises :class:`InvalidTopicName` otherwise."""
        parts = name.split("/")
        if len(parts) != 2:
            raise InvalidTopicName(
                f"Invalid namespace name {_shown(name)}: expected the form <tenant>/<namespace>"
            )
        return cls.of(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


def partition_index_of(name: str) -> int:
    """The partition index encoded in ``name`` (Java ``TopicName.getPartitionIndex``), or -1.

    The text after the *last* ``-partition-`` must be the canonical decimal spelling of a
    non-negative Java int.
    """
    cut = name.rfind(PARTITIONED_TOPIC_SUFFIX)
    if cut < 0:
        return -1
    digits = name[cut + len(PARTITIONED_TOPIC_SUFFIX) :]
    if not digits.isascii() or not digits.isdigit():
        return -1
    value = int(digits)
    if value > _JAVA_INT_MAX or str(value) != digits:
        return -1
    return value


def partitioned_topic_name(name: str) -> str:
    """``name`` (full or local) without its ``-partition-<i>`` suffix; ``name`` itself when
    it is not a partition's name. No validation: for names that came from the broker."""
    if partition_index_of(name) < 0:
        return name
    return name[: name.rfind(PARTITIONED_TOPIC_SUFFIX)]


def _base_local_name(local: str) -> str:
    return partitioned_topic_name(local)


def check_local_name(local: str, whole: str) -> str:
    """Check a topic's local name (``whole`` is the full name, for the message); returns
    ``local``. Raises :class:`InvalidTopicName`."""
    if not local.strip():
        raise InvalidTopicName(f"Invalid topic name {_shown(whole)}: local name must not be blank")
    if "/" in local:
        raise InvalidTopicName(
            f"Invalid topic name {_shown(whole)}: local name must not contain '/' "
            "(legacy names with a cluster segment are not supported)"
        )
    base = _base_local_name(local)
    problem = _text_problem(local) or (_text_problem(base) if base else None)
    if problem is None and _utf8_length(base) > LOCAL_NAME_LENGTH_MAX_BYTES:
        problem = f"local name longer than {LOCAL_NAME_LENGTH_MAX_BYTES} bytes"
    if problem is not None:
        raise TopicNameNotAllowed(f"Invalid topic name {_shown(whole)}: {problem}")
    return local


PARSED_TOPICS_MAX = 4096
"""Topic names :meth:`TopicName.parse` remembers at most (all are forgotten when full)."""

_parsed_topics: dict[str, TopicName] = {}


@frozen_struct(kw_only=False)
class TopicName:
    """A validated, fully qualified topic name. Build with :meth:`parse` or :meth:`of`."""

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a full or short topic name; raises :class:`InvalidTopicName`. The names
        parsed last are remembered (a client's lookup, producer and subscription each name
        the topic: one parse and validation, not three); what is returned is immutable."""
        parsed = _parsed_topics.get(name)
        if parsed is not None:
            return parsed
        parsed = cls._parse(name)
        if len(_parsed_topics) >= PARSED_TOPICS_MAX:
            _parsed_topics.clear()
        _parsed_topics[name] = parsed
        return parsed

    @classmethod
    def _parse(cls, name: str) -> TopicName:
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                domain_str, rest = (
                    TopicDomain.PERSISTENT.value,
                    f"{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}/{name}",
                )
            elif len(parts) == 3:
                domain_str, rest = TopicDomain.PERSISTENT.value, name
            else:
                raise InvalidTopicName(
                    f"Invalid short topic name {_shown(name)}: it should be in the format of "
                    "<tenant>/<namespace>/<topic> or <topic>"
                )
        else:
            domain_str, rest = name.split("://", 1)
        domain = TopicDomain.parse(domain_str)
        parts = rest.split("/", 2)
        if len(parts) != 3:
            raise InvalidTopicName(
                f"Invalid topic name {_shown(name)}: expected "
                f"{domain.value}://<tenant>/<namespace>/<topic>"
            )
        return cls.of(domain, parts[0], parts[1], parts[2])

    @classmethod
    def of(cls, domain: TopicDomain, tenant: str, namespace: str, local_name: str) -> TopicName:
        """Build from its parts (as an admin URL carries them); raises
        :class:`InvalidTopicName`. The tenant and namespace strings are interned: the
        topics of a namespace share one copy of each."""
        check_named_entity("tenant", tenant)
        check_named_entity("namespace", namespace)
        check_local_name(local_name, f"{domain.value}://{tenant}/{namespace}/{local_name}")
        return cls(domain, sys.intern(tenant), sys.intern(namespace), local_name)

    @property
    def full_name(self) -> str:
        """``domain://tenant/namespace/local``: the spelling used on the wire and as hash input."""
        return f"{self.domain.value}://{self.tenant}/{self.namespace}/{self.local_name}"

    def __str__(self) -> str:
        return self.full_name

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace)

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def partition_index(self) -> int:
        """Index of this partition, or -1 if the name is not a partition name."""
        return partition_index_of(self.local_name)

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_topic(self) -> TopicName:
        """The base (partitioned) topic this partition belongs to; ``self`` if not a partition."""
        if not self.is_partition:
            return self
        base = self.local_name[: self.local_name.rfind(PARTITIONED_TOPIC_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this (base) topic.

        Raises ``ValueError`` for a negative index or when ``self`` already is a partition
        (programmer errors: partitions of partitions do not exist).
        """
        if index < 0:
            raise ValueError(f"partition index must be >= 0, got {index}")
        if self.is_partition:
            raise ValueError(f"{self.full_name} is already a partition")
        return TopicName(
            self.domain,
            self.tenant,
            self.namespace,
            f"{self.local_name}{PARTITIONED_TOPIC_SUFFIX}{index}",
        )
