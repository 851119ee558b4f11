"""Seeded fuzzing of the binary protocol against a real ``magnetar standalone`` process.

Each case is one raw connection sending valid, mutated, truncated, wrongly checksummed,
non-UTF-8 and random frames (see :mod:`tests.fuzz.frames`). Asserted: every request that
carries a request id and reached the broker intact is answered, or the connection is
closed; every reply decodes; the process survives; its RSS settles back within 20% of
where it started once the connections are closed; and the official client still produces
and consumes.

The seed is printed (run with ``-s`` to see it, or read the failure message); replay with
``MAGNETAR_TEST_SEED=<seed>``. ``MAGNETAR_LONG_TESTS=1`` runs ten times as many cases.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import random
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

import magnetar.protocol as p
from magnetar.common.errors import ProtocolError
from magnetar.testing import StandaloneProcess

from .frames import CONNECT, SAMPLES, Case, expected_requests, frame_of, generate_case
from .process import produce_and_consume, wait_for_rss_below, warm_up

LONG = os.environ.get("MAGNETAR_LONG_TESTS") == "1"
CASES = 3000 if LONG else 300
MAX_MESSAGE_SIZE = 64 * 1024
FRAME_LIMIT = MAX_MESSAGE_SIZE + p.FRAME_PADDING_BYTES
ANSWER_TIMEOUT_S = 10.0
"""How long a case waits for its answers (far beyond any answer of a healthy broker)."""


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("MAGNETAR_TEST_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"binary-protocol fuzz seed {value} (replay: MAGNETAR_TEST_SEED={value})")
    return value


@dataclasses.dataclass
class Outcome:
    case: Case
    closed: bool
    unanswered: dict[int, str]
    bad_reply: str | None = None
    answered: int = 0
    """Expected requests answered."""


def run_case(port: int, case: Case) -> Outcome:
    """Send the case at once, then read until every expected request id was answered, the
    broker closed the connection, or :data:`ANSWER_TIMEOUT_S` passed."""
    expected = {
        rid: request.command for rid, request in expected_requests(case.data, FRAME_LIMIT).items()
    }
    answered: set[int] = set()
    decoder = p.FrameDecoder(1 << 26)
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            sock.sendall(case.data)
        except OSError:
            return Outcome(case, True, {}, None, len(expected.keys() & answered))
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while not expected.keys() <= answered:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                break
            except OSError:  # reset by the broker
                return Outcome(case, True, {}, None, len(expected.keys() & answered))
            if not data:
                return Outcome(case, True, {}, None, len(expected.keys() & answered))
            try:
                frames = decoder.feed(data)
            except ProtocolError as exc:
                return Outcome(case, False, {}, f"undecodable reply: {exc}")
            for frame in frames:
                rid = getattr(frame.command, "request_id", None)
                if rid is not None:
                    answered.add(rid)
    missing = {rid: name for rid, name in expected.items() if rid not in answered}
    return Outcome(case, False, missing, None, len(expected.keys() & answered))


def _report(seed: int, outcomes: list[Outcome]) -> str:
    lines = [f"seed {seed} (replay: MAGNETAR_TEST_SEED={seed})"]
    for o in outcomes[:10]:
        what = o.bad_reply or f"unanswered {sorted(o.unanswered.values())}"
        lines.append(f"  {what} after {o.case.kinds}")
    if len(outcomes) > 10:
        lines.append(f"  ... {len(outcomes) - 10} more")
    return "\n".join(lines)


def test_binary_protocol_fuzz(
    standalone_factory: Callable[..., StandaloneProcess], seed: int
) -> None:
    node = standalone_factory(
        "--max-message-size", str(MAX_MESSAGE_SIZE),
        "--partial-frame-timeout-ms", "2000",
    )  # fmt: skip
    # Warm up: one of every valid command, and the official client, before measuring.
    ids = itertools.count(1)
    for cmd, _ in SAMPLES:
        run_case(node.port, Case(CONNECT + frame_of(cmd), ["warm-up"]))
    start = warm_up(node)

    rng = random.Random(seed)
    cases = [generate_case(rng, FRAME_LIMIT, lambda: next(ids)) for _ in range(CASES)]
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda c: run_case(node.port, c), cases))

    assert node.proc is not None and node.proc.poll() is None, (
        f"the broker died\n{_report(seed, [])}\n{node.log_tail()}"
    )
    bad = [o for o in outcomes if o.bad_reply or o.unanswered]
    by_command = collections.Counter(name for o in bad for name in o.unanswered.values())
    assert not bad, f"{len(bad)} cases failed; unanswered {dict(by_command)}\n" + _report(seed, bad)
    answered = sum(o.answered for o in outcomes)
    print(
        f"{len(cases)} cases, {answered} requests answered, {sum(o.closed for o in outcomes)} connections closed by the broker"
    )
    assert answered >= len(cases) // 4  # most requests reach a handler, not just the decoder
    wait_for_rss_below(node, int(start * 1.2))
    produce_and_consume(node.url)
