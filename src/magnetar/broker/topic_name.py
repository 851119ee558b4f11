"""Topic and namespace names, parsed and validated as Pulsar's ``TopicName``/``NamespaceName``.

Accepted forms (reference §6.1; Java ``TopicName.get``)::

    persistent://tenant/namespace/topic       fully qualified
    non-persistent://tenant/namespace/topic   fully qualified, non-persistent domain
    tenant/namespace/topic                    short form -> persistent://tenant/namespace/topic
    topic                                     short form -> persistent://public/default/topic

A partition of a partitioned topic is the topic whose local name ends in
``-partition-<i>``, with ``<i>`` a canonical non-negative decimal (Java
``TopicName.getPartitionIndex``: ``-partition-01`` and ``-partition--1`` are *not*
partitions, they are ordinary local names).

Validation (every failure raises :class:`magnetar.common.errors.InvalidTopicName` whose
message names the offending part):

* tenant and namespace must be non-empty and match Pulsar's ``NamedEntity`` pattern
  ``[-=:.A-Za-z0-9_]+``;
* the local name must not be blank (Java ``StringUtils.isBlank``) and, in this
  implementation, must not contain ``/``;
* the domain must be ``persistent`` or ``non-persistent``.

Deliberate difference from Java: legacy V1 names carrying a cluster segment
(``persistent://tenant/cluster/namespace/topic``) are rejected; Pulsar 4 clients never
send them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from magnetar.common.errors import InvalidTopicName

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"

# Java NamedEntity: "^[-=:.\\w]*$" where \w is ASCII-only in Java regexes.
_NAMED_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]+")
_JAVA_INT_MAX = 2**31 - 1


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
            f"Invalid topic domain: '{value}' (expected 'persistent' or 'non-persistent')"
        )


def _check_named_entity(kind: str, value: str, whole: str) -> None:
    if not value:
        raise InvalidTopicName(f"Invalid name '{whole}': {kind} must not be empty")
    if _NAMED_ENTITY.fullmatch(value) is None:
        bad = sorted({ch for ch in value if _NAMED_ENTITY.fullmatch(ch) is None})
        raise InvalidTopicName(
            f"Invalid name '{whole}': {kind} '{value}' contains characters {bad!r}; "
            "allowed are letters, digits and - = : . _"
        )


@dataclass(frozen=True, slots=True)
class NamespaceName:
    """``tenant/namespace``. Construct with :meth:`parse` (or :meth:`of`) to validate."""

    tenant: str
    namespace: str

    @classmethod
    def of(cls, tenant: str, namespace: str) -> NamespaceName:
        whole = f"{tenant}/{namespace}"
        _check_named_entity("tenant", tenant, whole)
        _check_named_entity("namespace", namespace, whole)
        return cls(tenant, namespace)

    @classmethod
    def parse(cls, name: str) -> NamespaceName:
        """Parse ``tenant/namespace``; raises :class:`InvalidTopicName` otherwise."""
        parts = name.split("/")
        if len(parts) != 2:
            raise InvalidTopicName(
                f"Invalid namespace name '{name}': expected the form <tenant>/<namespace>"
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


@dataclass(frozen=True, slots=True)
class TopicName:
    """A validated, fully qualified topic name. Build with :meth:`parse`."""

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a full or short topic name; raises :class:`InvalidTopicName`."""
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
                    f"Invalid short topic name '{name}': it should be in the format of "
                    "<tenant>/<namespace>/<topic> or <topic>"
                )
        else:
            domain_str, rest = name.split("://", 1)
        domain = TopicDomain.parse(domain_str)
        parts = rest.split("/", 2)
        if len(parts) != 3:
            raise InvalidTopicName(
                f"Invalid topic name '{name}': expected {domain.value}://<tenant>/<namespace>/<topic>"
            )
        tenant, namespace, local = parts
        _check_named_entity("tenant", tenant, name)
        _check_named_entity("namespace", namespace, name)
        if not local.strip():
            raise InvalidTopicName(
                f"Invalid topic name '{name}': topic local name must not be blank"
            )
        if "/" in local:
            raise InvalidTopicName(
                f"Invalid topic name '{name}': topic local name '{local}' must not contain '/' "
                "(legacy names with a cluster segment are not supported)"
            )
        return cls(domain, tenant, namespace, local)

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
