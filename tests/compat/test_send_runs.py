"""SENDs pipelined in one segment reach the broker as runs (one per producer, stored as one
run of entries): every SEND keeps its own answer at its place, refused ones included, and
the stored entries' positions stay dense and in SEND order. Real standalone process; the
official wheel reads the stored messages back."""

from __future__ import annotations

import uuid

import pulsar

from magnetar.common.errors import ServerError
from magnetar.protocol import ProducerSuccess, SendError, SendReceipt
from magnetar.protocol.frame import Frame
from magnetar.testing import StandaloneProcess

from .helpers import new_client
from .raw import RawClient, message_frame


def _corrupt(frame: bytes) -> bytes:
    """The frame with its payload's last byte changed: the checksum no longer holds."""
    return frame[:-1] + bytes([frame[-1] ^ 0xFF])


def _answers(raw: RawClient, producer_id: int, count: int) -> list[SendReceipt | SendError]:
    out: list[SendReceipt | SendError] = []
    for _ in range(count):
        frame = raw.wait_for(
            lambda f: (
                isinstance(f.command, SendReceipt | SendError)
                and f.command.producer_id == producer_id
            )
        )
        out.append(frame.command)  # type: ignore[arg-type]
    return out


def _is_answer(frame: Frame) -> bool:
    return isinstance(frame.command, SendReceipt | SendError)


def test_a_run_with_a_bad_checksum_in_the_middle_answers_each_send_in_order(
    standalone: StandaloneProcess,
) -> None:
    topic = f"persistent://public/default/send-runs-{uuid.uuid4().hex[:8]}"
    raw = RawClient(standalone.port)
    try:
        for pid in (1, 2):
            answer = raw.create_producer(topic, pid, producer_name=f"runs-{pid}")
            assert isinstance(answer, ProducerSuccess), answer
        # One segment: p1 s0-s4 (s2 corrupted), p2 s0-s1, p1 s5 (corrupted), p1 s6.
        frames = [message_frame(1, s, b"p1-%d" % s, producer_name="runs-1") for s in range(7)]
        frames[2] = _corrupt(frames[2])
        frames[5] = _corrupt(frames[5])
        p2 = [message_frame(2, s, b"p2-%d" % s, producer_name="runs-2") for s in range(2)]
        raw.send_bytes(b"".join([*frames[:5], *p2, *frames[5:]]))

        one = _answers(raw, 1, 7)
        two = _answers(raw, 2, 2)
        assert [a.sequence_id for a in one] == list(range(7))  # SEND order, refusals included
        assert [a.sequence_id for a in two] == [0, 1]
        for s in (2, 5):
            err = one[s]
            assert isinstance(err, SendError) and err.error is ServerError.ChecksumError, err
        stored = [a for a in one if isinstance(a, SendReceipt)]
        assert len(stored) == 5
        positions = [(a.message_id.ledger_id, a.message_id.entry_id) for a in stored]  # type: ignore[union-attr]
        positions += [(a.message_id.ledger_id, a.message_id.entry_id) for a in two]  # type: ignore[union-attr]
        # dense, in stream order: p1 s0 s1 s3 s4, p2 s0 s1, p1 s6
        order = [positions[i] for i in (0, 1, 2, 3, 5, 6, 4)]
        ledger = order[0][0]
        assert order == [(ledger, order[0][1] + i) for i in range(7)], positions
        assert not [f for f in raw.inbox if _is_answer(f)]  # nothing answered twice
    finally:
        raw.close()

    client = new_client(standalone.url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(10_000).data() for _ in range(7)]
        assert got == [b"p1-0", b"p1-1", b"p1-3", b"p1-4", b"p2-0", b"p2-1", b"p1-6"]
        assert not reader.has_message_available()
    finally:
        client.close()
