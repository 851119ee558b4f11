"""A standalone whose journal holds a damaged record followed by valid ones refuses to
start with one clear line, and starts with ``--journal-skip-invalid-records`` (issue 13.4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pulsar

from magnetar.bookie.journal import HEADER_SIZE, journal_file_ids
from magnetar.testing import StandaloneProcess

TOPIC = "persistent://public/default/journal-corrupt"


def _damage_a_middle_record(bookie_dir: Path) -> None:
    """Point the checkpoint at the start of the newest journal file (so replay reads all of
    it) and flip a payload byte of a record in its middle."""
    journal_dir = bookie_dir / "journal"
    file_id = journal_file_ids(journal_dir)[-1]
    path = journal_dir / f"{file_id:020d}.jnl"
    checkpoint = json.loads((bookie_dir / "checkpoint").read_text())
    end = checkpoint["journal_offset"]
    assert checkpoint["journal_file"] == file_id and end > 0
    checkpoint["journal_offset"] = 0
    (bookie_dir / "checkpoint").write_text(json.dumps(checkpoint))
    data = bytearray(path.read_bytes())
    data[end // 2 + HEADER_SIZE] ^= 0xFF  # lands in some record's payload or header
    path.write_bytes(bytes(data))


def test_standalone_refuses_a_corrupt_journal_unless_told(tmp_path: Path) -> None:
    node = StandaloneProcess(tmp_path / "data")
    node.start()
    try:
        client = pulsar.Client(node.url)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(50):
            producer.send(b"m" * 1000, properties={"i": str(i)})
        client.close()
        assert node.stop() == 0
    finally:
        node.kill()
    _damage_a_middle_record(tmp_path / "data" / "bookie")
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone",
        "--data-dir", str(tmp_path / "data"), "--port", str(node.port),
        "--http-port", str(node.http_port),
    ]  # fmt: skip
    refused = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert lines[0].startswith("magnetar standalone: journal file ")
    assert "damaged record at offset" in lines[0] and "--journal-skip-invalid-records" in lines[0]

    node.extra_args = ["--journal-skip-invalid-records"]
    node.start()
    try:
        assert "skipping" in node.log_tail(200)
        client = pulsar.Client(node.url)
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        seen = set()
        while reader.has_message_available():
            seen.add(int(reader.read_next(10_000).properties()["i"]))
        client.close()
        # Every entry was also checkpointed into the entry logs before the damage.
        assert seen == set(range(50))
    finally:
        node.kill()
