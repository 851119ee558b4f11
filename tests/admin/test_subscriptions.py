"""Subscription endpoints over REST: list, create at a position, delete (412 / force),
skip, skip_all, expire, reset cursor (time and message id), peek with X-Pulsar-* headers."""

from __future__ import annotations

import time

import pulsar

from magnetar.testing import wait_until

from .conftest import Http


def _backlog(http: Http, topic: str, sub: str) -> int:
    value = http.ok("GET", f"{topic}/stats")["subscriptions"][sub]["msgBacklog"]
    assert isinstance(value, int)
    return value


def _publish(client: pulsar.Client, full: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(full, batching_enabled=False, producer_name=f"{full[-8:]}-p")
    ids = [
        producer.send(f"m{i}".encode(), properties={"k": f"v{i}"}, partition_key=f"key{i}")
        for i in range(count)
    ]
    producer.close()
    return ids


def test_create_list_delete(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    ids = _publish(client, full, 5)
    assert http.ok("GET", f"{topic}/subscriptions") == []
    assert http.put(f"{topic}/subscription/latest").status == 204
    assert http.put(f"{topic}/subscription/latest").status == 409
    assert http.put(f"{topic}/subscription/early", {"ledgerId": -1, "entryId": -1}).status == 204
    third = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
    assert http.put(f"{topic}/subscription/third", third).status == 204
    assert http.put(f"{topic}/subscription/bad", {"ledgerId": "x"}).status == 400
    assert http.ok("GET", f"{topic}/subscriptions") == ["early", "latest", "third"]
    assert _backlog(http, topic, "latest") == 0
    assert _backlog(http, topic, "early") == 5
    assert _backlog(http, topic, "third") == 3
    stats = http.ok("GET", f"{topic}/stats")["subscriptions"]["early"]
    assert stats["consumers"] == [] and stats["isDurable"] is True

    consumer = client.subscribe(full, "early")
    busy = http.delete(f"{topic}/subscription/early")
    assert busy.status == 412 and "consumers" in busy.reason
    assert http.delete(f"{topic}/subscription/early?force=true").status == 204
    assert http.delete(f"{topic}/subscription/third").status == 204
    assert http.delete(f"{topic}/subscription/third").status == 404
    assert http.ok("GET", f"{topic}/subscriptions") == ["latest"]
    assert http.get("/admin/v2/persistent/public/default/nope/subscriptions").status == 404
    consumer.close()


def test_skip_clear_expire(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    http.ok("PUT", topic)
    for sub in ("a", "b", "c"):
        http.ok("PUT", f"{topic}/subscription/{sub}")
    _publish(client, full, 10)
    assert http.post(f"{topic}/subscription/a/skip/3").status == 204
    assert _backlog(http, topic, "a") == 7
    assert http.post(f"{topic}/subscription/a/skip/-1").status == 400
    assert http.post(f"{topic}/subscription/a/skip/x").status == 400
    assert http.post(f"{topic}/subscription/zz/skip/1").status == 404
    assert http.post(f"{topic}/subscription/a/skip_all").status == 204
    assert _backlog(http, topic, "a") == 0
    # nothing is an hour old; everything is older than "0 seconds ago" plus a margin
    assert http.post(f"{topic}/subscription/b/expireMessages/3600").status == 204
    assert _backlog(http, topic, "b") == 10
    last_ms = http.ok("GET", f"{topic}/stats")["lastPublishTimestamp"]
    wait_until(lambda: time.time() * 1000 > last_ms + 2)  # "now" strictly after every publish
    assert http.post(f"{topic}/subscription/b/expireMessages/0").status == 204
    assert _backlog(http, topic, "b") == 0
    stats = http.ok("GET", f"{topic}/stats")["subscriptions"]["b"]
    assert stats["totalMsgExpired"] == 10 and stats["lastExpireTimestamp"] > 0
    assert http.post(f"{topic}/all_subscription/expireMessages/0").status == 204
    assert _backlog(http, topic, "c") == 0


def test_reset_cursor_by_time_and_id(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    before_ms = int(time.time() * 1000) - 1000
    consumer = client.subscribe(full, "s")
    ids = _publish(client, full, 6)
    for _ in range(6):
        consumer.acknowledge(consumer.receive(10_000))
    wait_until(lambda: _backlog(http, topic, "s") == 0, timeout_s=10)
    # reset to a time before everything: the connected consumer gets all 6 again
    assert http.post(f"{topic}/subscription/s/resetcursor/{before_ms}").status == 204
    again = [consumer.receive(15_000).data() for _ in range(6)]
    assert again == [f"m{i}".encode() for i in range(6)]
    # reset to the 4th message by id
    mid = {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id()}
    assert http.post(f"{topic}/subscription/s/resetcursor", mid).status == 204
    assert consumer.receive(15_000).data() == b"m3"
    assert http.post(f"{topic}/subscription/s/resetcursor", raw=b"nope").status == 400
    assert http.post(f"{topic}/subscription/missing/resetcursor", mid).status == 404
    consumer.close()


def test_peek_headers(http: Http, client: pulsar.Client, name: str) -> None:
    full = f"persistent://public/default/{name}"
    topic = f"/admin/v2/persistent/public/default/{name}"
    http.ok("PUT", topic)
    http.ok("PUT", f"{topic}/subscription/s")
    ids = _publish(client, full, 3)
    second = http.get(f"{topic}/subscription/s/position/2")
    assert second.status == 200 and second.body == b"m1"
    h = {k.lower(): v for k, v in second.headers.items()}
    assert h["x-pulsar-message-id"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert h["x-pulsar-property-k"] == "v1"
    assert h["x-pulsar-producer-name"] == f"{name[-8:]}-p"
    assert h["x-pulsar-sequence-id"] == "1"
    assert h["x-pulsar-partition-key"] == "key1"
    assert h["x-pulsar-publish-time"].endswith("Z")
    assert "x-pulsar-num-batch-message" not in h  # sent unbatched
    assert http.get(f"{topic}/subscription/s/position/4").status == 404
    assert http.get(f"{topic}/subscription/s/position/0").status == 400
    assert http.get(f"{topic}/subscription/zz/position/1").status == 404
    # peeking does not consume
    assert _backlog(http, topic, "s") == 3
    # a batch: the whole batch payload, with its size header
    batched = client.create_producer(full, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(4):
        batched.send_async(f"b{i}".encode(), None)
    batched.flush()
    batched.close()
    batch = http.get(f"{topic}/subscription/s/position/4")
    bh = {k.lower(): v for k, v in batch.headers.items()}
    assert bh["x-pulsar-num-batch-message"] == "4"
    assert int(bh["x-pulsar-batch-size"]) > 0
    http.ok("PUT", f"{topic}-p/partitions", 2)
    assert http.get(f"{topic}-p/subscription/s/position/1").status == 405
