from collections.abc import Sequence
from typing import Any

def send_fields(data: bytes, /) -> tuple[int, int, int, int, int, int, bool, bool] | None: ...
def scan_sends(
    data: bytes, view: memoryview, pos: int, max_frame: int, sends: list[Any], entry_type: type, /
) -> int: ...
def send_receipt_at(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int, /
) -> bytes: ...
def messages_at(
    consumer_id: int,
    partition: int,
    positions: Sequence[tuple[int, int]],
    entries: Sequence[bytes | memoryview],
    sizes: Sequence[int],
    /,
) -> list[bytes | memoryview] | None: ...
