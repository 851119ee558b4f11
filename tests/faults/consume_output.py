"""Reading what ``magnetar client consume --output json`` printed so far."""

from __future__ import annotations

import json
from pathlib import Path


def consumed(path: Path) -> list[str]:
    """The payloads of the complete lines the consumer has written to ``path`` so far. A
    last line without its newline is still being written (read mid-write, it is cut off)
    and is left for the next look."""
    lines = path.read_text(errors="replace").split("\n")[:-1]
    return [json.loads(line)["payload"] for line in lines if line.startswith("{")]
