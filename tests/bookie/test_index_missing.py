"""A bookie whose index file (the one its checkpoint names) is missing, cut short or changed
refuses to start with one clear line, and changes nothing on disk: starting without it would
serve ``NO_SUCH_LEDGER`` for acknowledged entries (the journal before the checkpoint is
gone)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crc32c
import pulsar
import pytest

from magnetar.bookie import Bookie, BookieConfig
from magnetar.bookie.errors import IndexCorrupt
from magnetar.bookie.ledger_storage import INDEX_RECORD
from magnetar.bookie_protocol.codec import OpType, Request, Status
from magnetar.testing import StandaloneProcess

from .test_bookie import RawConnection

TOPIC = "persistent://public/default/index-missing"


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


async def _bookie_with_ledger_0(data_dir: Path) -> int:
    """A bookie that stored ledger 0 and checkpointed it; returns its port (its id)."""
    bookie = Bookie(BookieConfig(data_dir=data_dir, port=0, disk_free_min_bytes=0), None)
    await bookie.start()
    conn = await RawConnection.open(bookie.port)
    for entry in range(20):
        payload = b"e%d" % entry
        request = Request(
            request_id=entry + 1,
            op=OpType.ADD_ENTRY,
            ledger_id=0,
            entry_id=entry,
            checksum=crc32c.crc32c(payload),
        )
        resp, _ = await conn.call(request, payload)
        assert resp.status == Status.OK
    conn.close()
    await bookie.stop()  # its last checkpoint holds ledger 0; the journal files are gone
    return bookie.port


@pytest.mark.parametrize("damage", ["missing", "short", "overwritten"])
async def test_a_bookie_refuses_to_start_without_its_index(tmp_path: Path, damage: str) -> None:
    data_dir = tmp_path / "bookie"
    port = await _bookie_with_ledger_0(data_dir)
    (index,) = (data_dir / "index").glob("*.idx")
    if damage == "missing":
        index.unlink()
    elif damage == "short":
        os.truncate(index, index.stat().st_size // 2)
    else:  # its first record (ledger 0, entry 0) zeroed, as a stray write would
        with index.open("r+b") as f:
            f.write(bytes(INDEX_RECORD.size))
    before = _files(data_dir)
    bookie = Bookie(BookieConfig(data_dir=data_dir, port=port, disk_free_min_bytes=0), None)
    with pytest.raises(
        IndexCorrupt, match=r"index file .*0000000001\.idx (is missing|holds|does not)"
    ):
        await bookie.start()
    await bookie.stop()
    assert _files(data_dir) == before


def test_standalone_refuses_to_start_without_its_index(tmp_path: Path) -> None:
    node = StandaloneProcess(tmp_path / "data")
    node.start()
    try:
        client = pulsar.Client(node.url)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(20):
            producer.send(b"m" * 1000, properties={"i": str(i)})
        client.close()
        assert node.stop() == 0
    finally:
        node.kill()
    for index in (tmp_path / "data" / "bookie" / "index").glob("*.idx"):
        index.unlink()
    args = [
        sys.executable, "-m", "magnetar.cli.main", "standalone",
        "--data-dir", str(tmp_path / "data"), "--port", str(node.port),
        "--http-port", str(node.http_port),
    ]  # fmt: skip
    refused = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert lines[0].startswith("magnetar standalone: index file "), lines[0]
    assert "is missing" in lines[0] and "Restore the data directory" in lines[0]
