"""Worker identity, its consumer-name spelling, settings checks and reading topic stats."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.functions import (
    DEFAULT_ASSIGNMENTS_TOPIC,
    DEFAULT_COORDINATION_SUBSCRIPTION,
    DEFAULT_COORDINATION_TOPIC,
    InvalidWorkerConfig,
    InvalidWorkerInfo,
    MembershipUnavailable,
    WorkerConfig,
    WorkerInfo,
    membership_from_stats,
)
from magnetar.functions.admin_stats import topic_stats_url


def test_consumer_name_round_trips() -> None:
    w = WorkerInfo("w-1", "10.0.0.5", 6750)
    assert w.consumer_name == "w-1:10.0.0.5:6750"
    assert WorkerInfo.parse(w.consumer_name) == w
    v6 = WorkerInfo("w2", "::1", 80)
    assert v6.consumer_name == "w2:::1:80"
    assert WorkerInfo.parse(v6.consumer_name) == v6


@pytest.mark.parametrize(
    "name",
    ["", "w1", "w1:host", "w1:host:", "w1:host:x1", ":host:1", "w1:host:70000", "w:h:\u0661"],
)
def test_names_that_are_not_workers_are_refused(name: str) -> None:
    with pytest.raises(InvalidWorkerInfo):
        WorkerInfo.parse(name)


@pytest.mark.parametrize(
    ("worker_id", "host", "port"),
    [("", "h", 1), ("a:b", "h", 1), ("w", "", 1), ("w", "a b", 1), ("w", "h", -1), ("w\n", "h", 1)],
)
def test_unusable_identities_are_refused(worker_id: str, host: str, port: int) -> None:
    with pytest.raises(InvalidWorkerInfo):
        WorkerInfo(worker_id, host, port)


def _config(**settings: Any) -> WorkerConfig:
    values: dict[str, Any] = {
        "worker": WorkerInfo("w1", "127.0.0.1", 6750),
        "service_url": "pulsar://127.0.0.1:6650",
        "admin_url": "http://127.0.0.1:8080",
    }
    return WorkerConfig(**(values | settings))


def test_config_defaults_and_normalized_topics() -> None:
    c = _config()
    assert c.coordination_topic == DEFAULT_COORDINATION_TOPIC
    assert c.coordination_topic == "persistent://public/functions/coordinate"
    assert c.coordination_subscription == DEFAULT_COORDINATION_SUBSCRIPTION == "participants"
    assert c.assignments_topic == DEFAULT_ASSIGNMENTS_TOPIC
    short = _config(coordination_topic="coord", assignments_topic="t/ns/assign")
    assert short.coordination_topic == "persistent://public/default/coord"
    assert short.assignments_topic == "persistent://t/ns/assign"


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"coordination_topic": "a/b/c/d/e"}, "coordination_topic"),
        ({"assignments_topic": DEFAULT_COORDINATION_TOPIC}, "both"),
        ({"coordination_subscription": " "}, "coordination_subscription"),
        ({"service_url": "127.0.0.1:6650"}, "service_url"),
        ({"admin_url": "pulsar://x:1"}, "admin_url"),
        ({"acquire_backoff_max_ms": 0}, "acquire_backoff_max_ms"),
        ({"admin_request_timeout_ms": 0}, "admin_request_timeout_ms"),
    ],
)
def test_unusable_settings_say_which(settings: dict[str, Any], names: str) -> None:
    with pytest.raises(InvalidWorkerConfig, match=names):
        _config(**settings)


def test_stats_url_quotes_the_local_name() -> None:
    assert (
        topic_stats_url("http://h:8080/", "persistent://public/functions/a b")
        == "http://h:8080/admin/v2/persistent/public/functions/a%20b/stats"
    )


def _stats(consumers: list[str], active: str | None, sub: str = "participants") -> Any:
    return {
        "subscriptions": {
            sub: {
                "type": "Failover",
                "activeConsumerName": active,
                "consumers": [{"consumerName": n} for n in consumers],
            }
        }
    }


def test_members_and_leader_from_stats() -> None:
    view = membership_from_stats(
        _stats(["w2:h:2", "w1:h:1", "reader-x", "w1:h:1"], "w2:h:2"), "participants"
    )
    assert view.members == (WorkerInfo("w1", "h", 1), WorkerInfo("w2", "h", 2))
    assert view.leader == WorkerInfo("w2", "h", 2)
    assert view.foreign_consumers == ("reader-x",)
    assert membership_from_stats(_stats([], None), "participants").leader is None
    assert membership_from_stats(_stats(["x"], "x"), "participants").leader is None


@pytest.mark.parametrize(
    "stats",
    [{}, {"subscriptions": {}}, _stats(["w:h:1"], None, sub="other"), {"subscriptions": []}],
)
def test_stats_without_the_subscription_are_an_error(stats: Any) -> None:
    with pytest.raises(MembershipUnavailable, match="participants"):
        membership_from_stats(stats, "participants")
