"""Authorization decisions as pure functions: a deny-by-default matrix of role x operation
x topic against the naive rule "allowed only if granted", and the grant/revoke edits of
the stored ``auth_policies`` JSON."""

from __future__ import annotations

import itertools

import pytest

from magnetar.auth.authorization import (
    AuthAction,
    Authorizer,
    AuthPolicies,
    InvalidPermission,
    TopicOperation,
    grant_namespace,
    grant_topic,
    parse_actions,
    revoke_namespace,
    revoke_topic,
    topic_permissions,
)

T1 = "persistent://t/ns/one"
T2 = "persistent://t/ns/two"
ADMIN_ROLES = ["tenant-admin"]
ROLES = ["root", "tenant-admin", "ns-producer", "t1-consumer", "stranger", "anonymous"]
STORED = {
    "namespace_auth": {"ns-producer": ["produce"]},
    "destination_auth": {T1: {"t1-consumer": ["consume"]}},
    "subscription_auth_roles": {},
}
GRANTS = {("ns-producer", "produce", T1), ("ns-producer", "produce", T2)} | {
    ("t1-consumer", "consume", T1)
}


def _expected(role: str, op: TopicOperation, topic: str) -> bool:
    """The naive model: super user and tenant admin everything; otherwise only grants."""
    if role in ("root", "tenant-admin"):
        return True
    if op is TopicOperation.LOOKUP:
        return any((role, a, topic) in GRANTS for a in ("produce", "consume"))
    return (role, op.value, topic) in GRANTS


@pytest.mark.parametrize(
    ("role", "op", "topic"), list(itertools.product(ROLES, list(TopicOperation), [T1, T2]))
)
def test_nothing_is_allowed_that_was_not_granted(role: str, op: TopicOperation, topic: str) -> None:
    authorizer = Authorizer(enabled=True, super_user_roles=frozenset({"root"}))
    allowed = authorizer.allows_topic(
        role, op, [topic], ADMIN_ROLES, AuthPolicies.from_json(STORED)
    )
    assert allowed is _expected(role, op, topic)


def test_no_role_is_allowed_nothing_and_disabled_allows_everything() -> None:
    policies = AuthPolicies.from_json(STORED)
    on = Authorizer(enabled=True, super_user_roles=frozenset({"root"}))
    off = Authorizer(enabled=False, super_user_roles=frozenset())
    for op in TopicOperation:
        assert not on.allows_topic(None, op, [T1], ADMIN_ROLES, policies)
        assert off.allows_topic(None, op, [T1], [], policies)
    assert not on.is_tenant_admin("stranger", ADMIN_ROLES)
    assert on.is_tenant_admin("tenant-admin", ADMIN_ROLES)
    assert not on.is_super_user("tenant-admin")


def test_a_partition_inherits_its_partitioned_topics_grants() -> None:
    on = Authorizer(enabled=True, super_user_roles=frozenset())
    policies = AuthPolicies.from_json(STORED)
    partition = T1 + "-partition-0"
    assert on.allows_topic("t1-consumer", TopicOperation.CONSUME, [partition, T1], [], policies)
    assert not on.allows_topic("t1-consumer", TopicOperation.CONSUME, [partition], [], policies)


def test_subscription_roles_restrict_consumers() -> None:
    on = Authorizer(enabled=True, super_user_roles=frozenset())
    stored = grant_namespace({}, "a", frozenset({AuthAction.CONSUME}))
    stored = grant_namespace(stored, "b", frozenset({AuthAction.CONSUME}))
    stored["subscription_auth_roles"] = {"only-a": ["a"]}
    policies = AuthPolicies.from_json(stored)
    assert on.allows_topic("a", TopicOperation.CONSUME, [T1], [], policies, "only-a")
    assert not on.allows_topic("b", TopicOperation.CONSUME, [T1], [], policies, "only-a")
    assert on.allows_topic("b", TopicOperation.CONSUME, [T1], [], policies, "other")


def test_grant_replaces_and_revoke_removes() -> None:
    produce, consume = frozenset({AuthAction.PRODUCE}), frozenset({AuthAction.CONSUME})
    stored = grant_namespace({}, "r", produce | consume)
    stored = grant_namespace(stored, "r", consume)
    assert stored["namespace_auth"] == {"r": ["consume"]}
    stored = grant_topic(stored, T1, "s", produce)
    assert topic_permissions(stored, [T1]) == {"r": ["consume"], "s": ["produce"]}
    assert topic_permissions(stored, [T2]) == {"r": ["consume"]}
    stored = revoke_topic(stored, T1, "s")
    assert stored["destination_auth"] == {}
    stored = revoke_namespace(stored, "r")
    assert stored["namespace_auth"] == {}
    on = Authorizer(enabled=True, super_user_roles=frozenset())
    for op in TopicOperation:
        assert not on.allows_topic("r", op, [T1], [], AuthPolicies.from_json(stored))


def test_unknown_actions_are_refused_on_grant_and_ignored_when_stored() -> None:
    assert parse_actions(["produce", "CONSUME", "functions"]) == {
        AuthAction.PRODUCE,
        AuthAction.CONSUME,
        AuthAction.FUNCTIONS,
    }
    with pytest.raises(InvalidPermission, match="unknown action 'write'"):
        parse_actions(["write"])
    policies = AuthPolicies.from_json({"namespace_auth": {"r": ["write", "consume"]}})
    assert policies.granted("r", []) == {AuthAction.CONSUME}
    assert AuthPolicies.from_json("garbage").granted("r", [T1]) == frozenset()
