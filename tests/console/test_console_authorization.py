"""What the admin request guard asks of the console's REST routes."""

from __future__ import annotations

from magnetar.admin.security import Need, requirement_for
from magnetar.console.router import HISTORY_PATH, NAMESPACES_PATH


def test_the_namespace_list_is_for_any_authenticated_role() -> None:
    assert requirement_for(NAMESPACES_PATH, "GET", {}).need is Need.AUTHENTICATED


def test_a_topic_history_needs_what_topic_stats_need() -> None:
    params = {"domain": "persistent", "tenant": "t", "namespace": "n", "topic": "x"}
    history = requirement_for(HISTORY_PATH, "GET", params)
    stats = requirement_for("/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats", "GET", params)
    assert history == stats
    assert history.need is Need.TOPIC_LOOKUP


def test_the_cluster_view_is_a_super_users() -> None:
    assert requirement_for("/admin/v2/console/cluster", "GET", {}).need is Need.SUPER_USER
