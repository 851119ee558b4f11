"""Helpers for the compatibility tests with the official client (the standalone process and
bounded waits come from :mod:`magnetar.testing`)."""

from __future__ import annotations

import logging

import pulsar
import pytest

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)


def receive_all(
    consumer: pulsar.Consumer | pulsar.Reader, count: int, timeout_ms: int = 10_000
) -> list[pulsar.Message]:
    out = []
    read = consumer.read_next if isinstance(consumer, pulsar.Reader) else consumer.receive
    for _ in range(count):
        out.append(read(timeout_ms))
    return out


def assert_nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        m = consumer.receive(timeout_ms)
        raise AssertionError(f"unexpected message {m.data()!r}")


def new_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=15, logger=_client_log)
