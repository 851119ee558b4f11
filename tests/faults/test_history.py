"""The history checker's verdicts on small hand-made histories."""

from __future__ import annotations

import threading

import pytest

from magnetar.testing.history import Consumer, History, StoredEntry


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


def stored_run(producer: str, ledger: int, first: int, payloads: list[str]) -> list[StoredEntry]:
    """``payloads`` stored in ``ledger`` from entry 0, with sequence ids from ``first``."""
    return [
        StoredEntry(ledger, i, producer, first + i, payload) for i, payload in enumerate(payloads)
    ]


def receipted_at(history: History, producer: str, positions: dict[str, tuple[int, int]]) -> None:
    for payload, position in positions.items():
        history.receipt(history.invoke_send(producer, payload), position)


def test_one_writer_at_a_time_passes_the_stored_check() -> None:
    history = History()
    receipted_at(history, "p", {"0": (1, 0), "1": (1, 1), "2": (2, 0)})
    stored = stored_run("p", 1, 0, ["0", "1"]) + stored_run("p", 2, 2, ["2"])
    assert history.check_stored(stored, dedup=True) == []


def test_a_receipt_from_a_fenced_writer_is_a_second_writer() -> None:
    history = History()
    # The old owner acknowledged "2" at 1:2 after the new owner fenced ledger 1 at entry 1.
    receipted_at(history, "p", {"0": (1, 0), "1": (1, 1), "2": (1, 2), "3": (2, 0)})
    stored = stored_run("p", 1, 0, ["0", "1"]) + stored_run("p", 2, 3, ["3"])
    assert history.check_stored(stored, dedup=True) == [
        "1 receipted at a position the topic does not hold them at (a second writer): "
        "p/2 receipted at (1, 2), stored at None"
    ]


def test_interleaved_writers_put_sequence_ids_out_of_order() -> None:
    history = History()
    stored = stored_run("p", 1, 0, ["0", "1", "2"]) + stored_run("p", 2, 1, ["1", "2"])
    problems = history.check_stored(stored, dedup=False)
    assert problems == [
        "producer 'p': sequence 1 at 2:0 stored after 2 at 1:2 (interleaved writers)",
    ]  # 2 again at 2:1 is a re-send stored twice: allowed without deduplication
    # With deduplication a sequence id stored twice is a problem too.
    assert history.check_stored(stored_run("p", 1, 0, ["0"]) * 2, dedup=True) == [
        "1 stored more than once with deduplication on: p/0",
        "producer 'p': sequence 0 at 1:0 stored after 0 at 1:0 (interleaved writers)",
    ]


def test_a_delivery_at_or_before_a_durable_mark_delete_is_a_cursor_regression() -> None:
    history = History()
    receipted_at(history, "p", {"0": (1, 0), "1": (1, 1), "2": (2, 0)})
    first = history.open_consumer("s")
    read(history, first, "p", "0", "1", "2")
    history.durable_mark("s", (1, 1))
    later = history.open_consumer("s")
    read(history, later, "p", "1", "2")
    assert history.check(first, dedup=False) == [
        "subscription 's': 1 delivered to a later consumer at or before the durable "
        "mark-delete (1, 1): p/1"
    ]


def test_a_duplicates_receipt_names_no_position() -> None:
    history = History()
    receipted_at(history, "p", {"0": (1, 0), "1": (-1, -1)})
    assert history.check_stored(stored_run("p", 1, 0, ["0", "1"]), dedup=True) == []
    assert history.check_stored(stored_run("p", 1, 0, ["0"]), dedup=True) == [
        "1 receipted at a position the topic does not hold them at (a second writer): "
        "p/1 receipted at (-1, -1), stored at None"
    ]


def test_a_recognised_duplicates_receipt_is_not_before_a_mark_delete() -> None:
    history = History()
    receipted_at(history, "p", {"0": (1, 0), "1": (-1, -1), "2": (1, 5)})
    history.durable_mark("s", (1, 0))
    later = history.open_consumer("s")
    history.received(later, "p", "1")  # no position known: not checked
    history.received(later, "p", "2", (1, 0))  # delivered from where the mark covers
    assert history.check(history.open_consumer("audit"), dedup=False)[-1] == (
        "subscription 's': 1 delivered to a later consumer at or before the durable "
        "mark-delete (1, 0): p/2"
    )
