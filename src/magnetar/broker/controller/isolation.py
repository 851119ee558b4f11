"""Namespace isolation policies (Pulsar's ``ns-isolation-policy``): which brokers may own
the bundles of which namespaces. Pure: the controller's assignment asks
:meth:`BrokerIsolation.candidates`; the runner keeps it fed with the stored policies.

A policy names namespaces (regexes of ``tenant/namespace``), **primary** and **secondary**
brokers (regexes, each matched in full against a broker's host or its whole id
``host:port``; Pulsar matches the host, the id lets brokers sharing a host be told apart)
and an automatic failover policy, ``min_available`` with ``min_limit`` and
``usage_threshold``. As Pulsar's load manager applies them:

* a namespace matching a policy (the first, by policy name, whose regexes match) is owned by
  its live primaries; when fewer than ``min_limit`` primaries live, its live secondaries are
  candidates too; a broker that is neither never owns it;
* any other namespace is owned only by *shared* brokers: those no policy names as primary;
* no candidate alive: the bundle stays unassigned until one is.

``usage_threshold`` is validated and stored, and not applied: Pulsar's modular load manager
fails over on ``min_limit`` alone too. Setting a policy moves nothing already owned (as in
Pulsar): it rules each assignment from then on; unload a namespace to move it now.

Stored as Pulsar stores them: one JSON object ``{policy name: NamespaceIsolationData}`` at
:func:`isolation_policies_path`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.common.errors import MagnetarError

POLICY_TYPE_MIN_AVAILABLE = "min_available"
REGEXES_MAX = 64
"""Bound on the regexes of one list (namespaces, primary, secondary)."""
REGEX_CHARS_MAX = 256
POLICIES_MAX = 1_000
POLICY_NAME_CHARS_MAX = 256


class InvalidIsolationPolicy(MagnetarError):
    """A policy body that cannot work; the message says which field."""


def isolation_policies_path(cluster: str) -> str:
    """Where a cluster's policies live in the metadata store (Pulsar's path)."""
    return f"/admin/clusters/{cluster}/namespaceIsolationPolicies"


def _regexes(value: Any, field: str, *, required: bool) -> tuple[re.Pattern[str], ...]:
    if value is None:
        value = []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidIsolationPolicy(f"{field} must be a list of regular expressions")
    if required and not value:
        raise InvalidIsolationPolicy(f"{field} must name at least one regular expression")
    if len(value) > REGEXES_MAX:
        raise InvalidIsolationPolicy(f"{field}: at most {REGEXES_MAX} regular expressions")
    patterns = []
    for text in value:
        if not text or len(text) > REGEX_CHARS_MAX:
            raise InvalidIsolationPolicy(
                f"{field}: {text[:40]!r} must have 1 to {REGEX_CHARS_MAX} characters"
            )
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise InvalidIsolationPolicy(
                f"{field}: {text!r} is not a regular expression: {exc}"
            ) from None
    return tuple(patterns)


def _whole_number(parameters: Mapping[str, Any], key: str) -> int:
    value = parameters.get(key)
    try:
        number = int(str(value).strip())
    except ValueError:
        number = -1
    if isinstance(value, bool) or number < 0:
        raise InvalidIsolationPolicy(
            f"auto_failover_policy.parameters.{key} must be a whole number (got {value!r})"
        )
    return number


def _matches(patterns: Iterable[re.Pattern[str]], broker: str) -> bool:
    host = broker.rsplit(":", 1)[0]
    return any(p.fullmatch(host) or p.fullmatch(broker) for p in patterns)


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    namespaces: tuple[re.Pattern[str], ...]
    primary: tuple[re.Pattern[str], ...]
    secondary: tuple[re.Pattern[str], ...]
    min_limit: int
    usage_threshold: int

    @classmethod
    def from_json(cls, body: Any) -> IsolationPolicy:
        """From Pulsar's ``NamespaceIsolationData`` JSON; raises
        :class:`InvalidIsolationPolicy`."""
        if not isinstance(body, dict):
            raise InvalidIsolationPolicy("a namespace isolation policy must be a JSON object")
        failover = body.get("auto_failover_policy")
        if not isinstance(failover, dict):
            raise InvalidIsolationPolicy(
                'auto_failover_policy is required: {"policy_type": "min_available", '
                '"parameters": {"min_limit": "1", "usage_threshold": "80"}}'
            )
        policy_type = str(failover.get("policy_type", "")).lower()
        if policy_type != POLICY_TYPE_MIN_AVAILABLE:
            raise InvalidIsolationPolicy(
                f"auto_failover_policy.policy_type {failover.get('policy_type')!r}: only "
                f"{POLICY_TYPE_MIN_AVAILABLE} is known"
            )
        parameters = failover.get("parameters")
        if not isinstance(parameters, dict):
            raise InvalidIsolationPolicy(
                "auto_failover_policy.parameters must hold min_limit and usage_threshold"
            )
        return cls(
            namespaces=_regexes(body.get("namespaces"), "namespaces", required=True),
            primary=_regexes(body.get("primary"), "primary", required=True),
            secondary=_regexes(body.get("secondary"), "secondary", required=False),
            min_limit=_whole_number(parameters, "min_limit"),
            usage_threshold=_whole_number(parameters, "usage_threshold"),
        )

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``NamespaceIsolationData`` (parameters as strings, as Pulsar keeps
        them)."""
        return {
            "namespaces": [p.pattern for p in self.namespaces],
            "primary": [p.pattern for p in self.primary],
            "secondary": [p.pattern for p in self.secondary],
            "auto_failover_policy": {
                "policy_type": POLICY_TYPE_MIN_AVAILABLE,
                "parameters": {
                    "min_limit": str(self.min_limit),
                    "usage_threshold": str(self.usage_threshold),
                },
            },
        }

    def applies_to(self, namespace: str) -> bool:
        return any(p.fullmatch(namespace) for p in self.namespaces)

    def is_primary(self, broker: str) -> bool:
        return _matches(self.primary, broker)

    def is_secondary(self, broker: str) -> bool:
        return _matches(self.secondary, broker)


@dataclass(frozen=True, slots=True)
class IsolationPolicies:
    """A cluster's policies by name."""

    by_name: Mapping[str, IsolationPolicy]

    @classmethod
    def from_stored(cls, value: bytes) -> IsolationPolicies:
        """From the stored JSON map; a policy that does not parse is left out (it was
        checked when set), so one bad entry does not unpin every namespace."""
        try:
            body = json.loads(value) if value.strip() else {}
        except ValueError:
            return NO_ISOLATION
        if not isinstance(body, dict):
            return NO_ISOLATION
        policies = {}
        for name, data in body.items():
            try:
                policies[str(name)] = IsolationPolicy.from_json(data)
            except InvalidIsolationPolicy:
                continue
        return cls(policies)

    def to_json(self) -> dict[str, Any]:
        return {name: self.by_name[name].to_json() for name in sorted(self.by_name)}

    def policy_for(self, namespace: str) -> IsolationPolicy | None:
        """The first policy (by name) whose namespace regexes match ``namespace``."""
        for name in sorted(self.by_name):
            if self.by_name[name].applies_to(namespace):
                return self.by_name[name]
        return None

    def is_shared(self, broker: str) -> bool:
        """No policy names ``broker`` as a primary: it serves namespaces without a policy."""
        return not any(p.is_primary(broker) for p in self.by_name.values())

    def candidates(self, namespace: str, live: Iterable[str]) -> frozenset[str]:
        """The live brokers that may own a bundle of ``namespace`` now (module docstring)."""
        live = frozenset(live)
        if not self.by_name:
            return live
        policy = self.policy_for(namespace)
        if policy is None:
            return frozenset(b for b in live if self.is_shared(b))
        primaries = frozenset(b for b in live if policy.is_primary(b))
        if len(primaries) >= policy.min_limit:
            return primaries
        return primaries | frozenset(b for b in live if policy.is_secondary(b))


NO_ISOLATION = IsolationPolicies({})


class BrokerIsolation:
    """The policies in force for one controller: :meth:`candidates` is what bundle
    assignment calls; the runner replaces :attr:`policies` when the stored ones change."""

    def __init__(self, policies: IsolationPolicies = NO_ISOLATION) -> None:
        self.policies = policies

    def candidates(self, namespace: str, live: frozenset[str]) -> frozenset[str]:
        return self.policies.candidates(namespace, live)
