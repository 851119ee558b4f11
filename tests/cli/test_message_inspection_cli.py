"""``admin topics examine-message``, ``get-message-by-id`` and ``analyze-backlog`` against a
real standalone: stored messages looked at without moving a subscription."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from .conftest import Cli


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"stdout={result.stdout!r} stderr={result.stderr!r}"
    return result.stdout


def _json(cli: Cli, *args: str) -> Any:
    return json.loads(_ok(cli.admin("--output", "json", *args)))


def test_examine_get_by_id_and_analyze_backlog(cli: Cli, topic: str) -> None:
    _ok(cli.admin("topics", "create", topic))
    _ok(cli.admin("topics", "create-subscription", topic, "-s", "audit"))
    _ok(cli.client("produce", topic, "-m", "a0,a1,a2"))  # one entry of three messages
    _ok(cli.client("produce", topic, "-m", "b", "--disable-batching"))
    _ok(cli.client("produce", topic, "-m", "c", "--disable-batching", "-k", "K"))

    latest = _json(cli, "topics", "examine-message", topic)
    assert [m["payload"] for m in latest] == ["c"] and latest[0]["key"] == "K"
    earliest = _json(cli, "topics", "examine-message", topic, "-i", "earliest")
    assert [m["payload"] for m in earliest] == ["a0", "a1", "a2"]
    second_last = _json(cli, "topics", "examine-message", topic, "-i", "latest", "-m", "2")
    assert [m["payload"] for m in second_last] == ["b"]
    text = _ok(cli.admin("topics", "examine-message", topic))
    assert "Message ID: " in text and text.rstrip().endswith("c")

    ledger, entry = second_last[0]["messageId"].split(":")[:2]
    by_id = _json(cli, "topics", "get-message-by-id", topic, "-l", ledger, "-e", entry)
    assert [m["payload"] for m in by_id] == ["b"]
    missing = cli.admin("topics", "get-message-by-id", topic, "-l", ledger, "-e", "999")
    assert missing.returncode == 1 and "(HTTP 404)" in missing.stderr
    beyond = cli.admin("topics", "examine-message", topic, "-i", "earliest", "-m", "4")
    assert beyond.returncode == 1 and "(HTTP 404)" in beyond.stderr

    backlog = _json(cli, "topics", "analyze-backlog", topic, "-s", "audit")
    assert (backlog["entries"], backlog["messages"], backlog["aborted"]) == (3, 5, False)
    assert backlog["lastMessageId"] == f"{ledger}:{int(entry) + 1}"
    from_b = _json(
        cli, "topics", "analyze-backlog", topic, "-s", "audit", "-m", f"{ledger}:{entry}"
    )
    assert (from_b["entries"], from_b["messages"]) == (2, 2)
    _ok(cli.admin("topics", "skip", topic, "-s", "audit", "-n", "1"))
    after_skip = _json(cli, "topics", "analyze-backlog", topic, "-s", "audit")
    assert (after_skip["entries"], after_skip["messages"]) == (2, 2)
    nobody = cli.admin("topics", "analyze-backlog", topic, "-s", "nobody")
    assert nobody.returncode == 1 and "(HTTP 404)" in nobody.stderr
