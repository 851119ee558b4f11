"""Namespace isolation policies: parsing, the candidate brokers of a namespace (Pulsar's
primary / secondary / shared rules with ``min_available``), and the bundle state machine
obeying them at logical times."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.broker.controller import (
    AssignBundle,
    BundleState,
    BundleStateMachine,
    ControllerPolicy,
    LoadPolicy,
    LoadReport,
    NamespaceBundles,
)
from magnetar.broker.controller.isolation import (
    BrokerIsolation,
    InvalidIsolationPolicy,
    IsolationPolicies,
    IsolationPolicy,
)

B1, B2, B3 = "127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"
PINNED = "acme/pinned"


def data(
    namespaces: list[str],
    primary: list[str],
    secondary: list[str] | None = None,
    min_limit: Any = "1",
    usage_threshold: Any = "80",
) -> dict[str, Any]:
    return {
        "namespaces": namespaces,
        "primary": primary,
        "secondary": secondary or [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": min_limit, "usage_threshold": usage_threshold},
        },
    }


def policies(**named: dict[str, Any]) -> IsolationPolicies:
    return IsolationPolicies.from_stored(json.dumps(named).encode())


PIN = policies(pin=data(["acme/pin.*"], [r"127\.0\.0\.1:8081"], [r".*:8082"]))


def test_a_policy_round_trips_as_pulsar_stores_it() -> None:
    body = data(["acme/.*"], ["10.0.0.*"], ["10.0.1.*"], min_limit=2, usage_threshold=70)
    parsed = IsolationPolicy.from_json(body)
    assert parsed.min_limit == 2 and parsed.usage_threshold == 70
    assert parsed.to_json() == data(["acme/.*"], ["10.0.0.*"], ["10.0.1.*"], "2", "70")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "JSON object"),
        (data([], ["a"]), "namespaces must name at least one"),
        (data(["x/y"], []), "primary must name at least one"),
        (data(["x/y"], ["("]), "not a regular expression"),
        (data(["x/y"], ["a"], min_limit="many"), "min_limit must be a whole number"),
        (data(["x/y"], ["a"], usage_threshold=-1), "usage_threshold must be a whole number"),
        ({**data(["x/y"], ["a"]), "auto_failover_policy": None}, "auto_failover_policy is required"),
        ({**data(["x/y"], ["a"]), "auto_failover_policy": {"policy_type": "sometimes"}},
         "only min_available"),
        (data(["x/y"], ["a" * 300]), "1 to 256 characters"),
    ],
)  # fmt: skip
def test_unusable_policies_are_refused_naming_the_field(body: Any, says: str) -> None:
    with pytest.raises(InvalidIsolationPolicy, match=says):
        IsolationPolicy.from_json(body)


def test_candidates_primary_then_secondary_then_shared() -> None:
    live = {B1, B2, B3}
    assert PIN.candidates(PINNED, live) == {B1}  # enough primaries (min_limit 1)
    assert PIN.candidates(PINNED, {B2, B3}) == {B2}  # failover to the secondary only
    assert PIN.candidates(PINNED, {B3}) == set()  # B3 is in no list: never
    # a namespace without a policy: shared brokers only (not a primary of any policy)
    assert PIN.candidates("acme/other", live) == {B2, B3}
    assert PIN.candidates("acme/other", {B1}) == set()
    # no policies at all: every live broker
    assert IsolationPolicies({}).candidates(PINNED, live) == live


def test_hosts_match_without_the_port_and_min_limit_counts_live_primaries() -> None:
    by_host = policies(p=data([PINNED], [r"10\.0\.0\.\d+"], ["10.0.9.9"], min_limit=2))
    live = {"10.0.0.1:8080", "10.0.0.2:8080", "10.0.9.9:8080"}
    assert by_host.candidates(PINNED, live) == {"10.0.0.1:8080", "10.0.0.2:8080"}
    fewer = {"10.0.0.1:8080", "10.0.9.9:8080"}
    assert by_host.candidates(PINNED, fewer) == fewer  # 1 < min_limit 2: secondaries join


def test_a_stored_map_with_a_broken_entry_keeps_the_others() -> None:
    stored = json.dumps({"bad": {"namespaces": "x"}, "pin": data([PINNED], ["b1"])}).encode()
    assert sorted(IsolationPolicies.from_stored(stored).by_name) == ["pin"]
    assert IsolationPolicies.from_stored(b"not json").by_name == {}


def _machine(isolation: BrokerIsolation, live: set[str], load: LoadPolicy | None = None) -> Any:
    policy = ControllerPolicy(broker_candidates=isolation.candidates, load=load or LoadPolicy())
    m = BundleStateMachine(1, policy=policy, live_brokers=live)
    m.start(0)
    return m


def _owners(m: BundleStateMachine, namespace: str) -> set[str | None]:
    ns = m.namespace(namespace)
    assert ns is not None
    return {m.record(b).broker for b in ns.bundles}


def _acknowledge(m: BundleStateMachine, effects: list[Any], now_ms: int) -> None:
    for effect in effects:
        if isinstance(effect, AssignBundle):
            m.ownership_acquired(effect.bundle, effect.broker, effect.epoch, now_ms)


def test_the_machine_assigns_pinned_bundles_to_primaries_and_fails_over() -> None:
    isolation = BrokerIsolation(PIN)
    m = _machine(isolation, {B1, B2, B3})
    _acknowledge(m, m.namespace_added(NamespaceBundles.default(PINNED, 4), 10), 10)
    _acknowledge(m, m.namespace_added(NamespaceBundles.default("acme/other", 4), 10), 10)
    assert _owners(m, PINNED) == {B1}
    assert _owners(m, "acme/other") == {B2, B3}
    # the primary leaves: its bundles go to the secondary, never to B3
    _acknowledge(m, m.broker_left(B1, 20), 20)
    assert _owners(m, PINNED) == {B2}
    # the secondary leaves too: nobody may own them, they wait unassigned
    m.broker_left(B2, 30)
    ns = m.namespace(PINNED)
    assert ns is not None
    assert {m.record(b).state for b in ns.bundles} == {BundleState.UNASSIGNED}
    m.tick(40)
    assert {m.record(b).state for b in ns.bundles} == {BundleState.UNASSIGNED}
    # the primary is back: they are assigned to it
    _acknowledge(m, m.broker_joined(B1, 50), 50)
    assert _owners(m, PINNED) == {B1}


def test_a_policy_set_later_rules_the_next_assignment() -> None:
    isolation = BrokerIsolation()
    m = _machine(isolation, {B1, B2, B3})
    isolation.policies = PIN
    _acknowledge(m, m.namespace_added(NamespaceBundles.default(PINNED, 4), 10), 10)
    assert _owners(m, PINNED) == {B1}


def test_rebalancing_and_shedding_leave_pinned_bundles_where_they_must_be() -> None:
    load = LoadPolicy(rebalance_count_spread_max=1, rebalance_owned_min_ms=0)
    m = _machine(BrokerIsolation(PIN), {B1, B2, B3}, load)
    _acknowledge(m, m.namespace_added(NamespaceBundles.default(PINNED, 8), 10), 10)
    assert _owners(m, PINNED) == {B1}  # 8 bundles on B1, none elsewhere: a big spread
    assert m.tick(1_000) == []  # nothing may move them: no release
    m.load_reported(LoadReport(broker=B1, reported_ms=2_000, cpu_percent=99.0), 2_000)
    assert m.tick(2_000) == []  # overloaded, but the only primary: nothing shed
