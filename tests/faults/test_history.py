"""The history checker's verdicts on small hand-made histories."""

from __future__ import annotations

import threading

import pytest

from magnetar.testing.history import Consumer, History


def sent(history: History, producer: str, *payloads: str, ok: bool = True) -> None:
    for payload in payloads:
        send = history.invoke_send(producer, payload)
        if ok:
            history.receipt(send, (1, len(payload)))
        else:
            history.failed(send, "timeout")


def read(history: History, consumer: Consumer, producer: str, *payloads: str) -> None:
    for payload in payloads:
        history.received(consumer, producer, payload)


def test_a_valid_history_has_no_problems() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1", "2")
    sent(history, "q", "a", "b")
    read(history, audit, "p", "0")
    read(history, audit, "q", "a")
    read(history, audit, "p", "1", "2")
    read(history, audit, "q", "b")
    assert history.check(audit, dedup=True) == []


def test_a_receipted_message_missing_is_lost() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1")
    read(history, audit, "p", "0")
    assert history.check(audit, dedup=False) == ["1 receipted but never read back: p/1"]


def test_a_failed_send_may_or_may_not_be_stored() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1", ok=False)
    read(history, audit, "p", "1")
    assert history.check(audit, dedup=True) == []
    assert [s.payload for s in history.receipted()] == []


def test_duplicates_break_only_exactly_once() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1")
    read(history, audit, "p", "0", "1", "0")
    assert history.check(audit, dedup=False) == []
    assert history.check(audit, dedup=True) == [
        "1 read back more than once with deduplication on: p/0"
    ]


def test_per_producer_order_is_checked_on_first_occurrences() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1", "2")
    read(history, audit, "p", "0", "2", "1")
    assert history.check(audit, dedup=True) == ["producer 'p': '1' read back after '2', sent later"]


def test_an_unknown_message_is_reported() -> None:
    history = History()
    audit = history.open_consumer("audit")
    read(history, audit, "p", "x")
    assert history.check(audit, dedup=False) == ["1 read back but never sent: p/x"]


def test_an_acknowledged_message_redelivered_to_a_later_consumer() -> None:
    history = History()
    audit = history.open_consumer("audit")
    sent(history, "p", "0", "1")
    read(history, audit, "p", "0", "1")
    first = history.open_consumer("work")
    read(history, first, "p", "0", "1")
    history.acked(first, "p", "0")
    second = history.open_consumer("work")
    read(history, second, "p", "1")  # unacknowledged: redelivery is right
    assert history.check(audit, dedup=True) == []
    read(history, second, "p", "0")
    other = history.open_consumer("other")  # another subscription sees everything
    read(history, other, "p", "0")
    assert history.check(audit, dedup=True) == [
        "subscription 'work': 1 acknowledged, then delivered to a later consumer: p/0"
    ]


def test_a_payload_must_be_unique_per_producer() -> None:
    history = History()
    sent(history, "p", "0")
    sent(history, "q", "0")
    with pytest.raises(ValueError, match="not unique"):
        history.invoke_send("p", "0")


def test_threads_record_concurrently() -> None:
    history = History()
    audit = history.open_consumer("audit")

    def produce(name: str) -> None:
        sent(history, name, *(str(i) for i in range(200)))

    threads = [threading.Thread(target=produce, args=(f"p{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(4):
        read(history, audit, f"p{i}", *(str(j) for j in range(200)))
    assert len(history.receipted()) == 800
    assert history.unanswered() == []
    assert history.check(audit, dedup=True) == []
