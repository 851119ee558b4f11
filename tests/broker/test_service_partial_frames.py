"""The broker's bound on bytes held in partially read frames, on a real
:class:`BrokerService` in this process over loopback TCP (see
:mod:`magnetar.broker.partial_frames`): past ``partial_frame_bytes_max`` connections
holding part of a frame stop reading, and resume once others free their bytes; a frame
not complete within ``partial_frame_timeout_ms`` closes its connection; a connection that
ends frees what it held."""

from __future__ import annotations

import struct
from pathlib import Path

from magnetar.common.clock import ManualClock
from magnetar.protocol import MessageMetadata, ProducerSuccess, SendReceipt, encode_send
from magnetar.testing import wait_until_async

from .test_service_connection import AsyncRawClient, new_topic, producer_cmd, running_broker

KIB = 1024


def send_frame(payload_bytes: int) -> bytes:
    md = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    return b"".join(encode_send(1, 0, md, b"x" * payload_bytes))


async def test_past_the_budget_readers_stop_and_resume_when_bytes_are_freed(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    async with running_broker(
        tmp_path, clock=clock, partial_frame_bytes_max=100 * KIB, partial_frame_timeout_ms=2_000
    ) as broker:
        budget = broker.partial_frames
        # A hog: announces a 1 MiB frame and sends 150 KiB of it.
        hog = await AsyncRawClient.open(broker.port)
        hog.writer.write(struct.pack(">II", 1024 * KIB - 4, 50) + b"\x00" * (150 * KIB - 8))
        await wait_until_async(lambda: budget.held_bytes == 150 * KIB - 4, timeout_s=10)
        assert budget.waiting == 0  # the oldest partial frame is always read on
        held = budget.held_bytes
        clock.advance(1.5)

        # A well-behaved producer whose 200 KiB message arrives while the budget is spent.
        producer = await AsyncRawClient.open(broker.port)
        assert isinstance(
            await producer.request(producer_cmd(producer, new_topic(), 1)), ProducerSuccess
        )
        frame = send_frame(200 * KIB)
        producer.writer.write(frame[: 10 * KIB])
        await wait_until_async(lambda: budget.waiting == 1, timeout_s=10)
        producer.writer.write(frame[10 * KIB :])  # waits in the socket buffers
        assert budget.held_bytes <= held + 10 * KIB

        # The hog's frame is overdue (a stopped connection cannot even see its peer leave):
        # it is closed, its bytes are freed, and the producer reads on and is answered.
        clock.advance(1.0)
        assert await hog.closed_by_broker()
        receipt = await producer.wait_for(lambda f: isinstance(f.command, SendReceipt))
        assert isinstance(receipt.command, SendReceipt)
        await wait_until_async(lambda: budget.held_bytes == 0, timeout_s=10)
        assert budget.waiting == 0
        await producer.close()


async def test_a_frame_not_completed_in_time_closes_its_connection(tmp_path: Path) -> None:
    clock = ManualClock()
    async with running_broker(tmp_path, clock=clock, partial_frame_timeout_ms=2_000) as broker:
        budget = broker.partial_frames
        slow = await AsyncRawClient.open(broker.port)
        other = await AsyncRawClient.open(broker.port)
        slow.writer.write(send_frame(100)[:50])  # and nothing more
        await wait_until_async(lambda: budget.held_bytes > 0, timeout_s=10)
        clock.advance(1.0)  # within the timeout: still open
        assert await slow.closed_by_broker(timeout_s=0.2) is False
        clock.advance(1.5)
        assert await slow.closed_by_broker()
        assert budget.held_bytes == 0
        # a connection without a partial frame is not affected
        assert isinstance(await other.request(producer_cmd(other, new_topic(), 1)), ProducerSuccess)
        await other.close()


async def test_a_closed_connection_frees_its_partial_frame(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        budget = broker.partial_frames
        raw = await AsyncRawClient.open(broker.port)
        raw.writer.write(send_frame(300 * KIB)[: 200 * KIB])
        await wait_until_async(lambda: budget.held_bytes == 200 * KIB - 4, timeout_s=10)
        await raw.close()
        await wait_until_async(lambda: budget.held_bytes == 0, timeout_s=10)
