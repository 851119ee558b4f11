"""The cookie that ties a data directory to one bookie id.

A bookie's first start writes ``<data dir>/cookie`` (its id and a random instance id) and
puts the same in the metadata store at ``/ledgers/cookies/<bookie id>``. Every later start
checks both: a data directory of another bookie, or a registered bookie id over another (or
an empty) data directory, refuses to start with
:class:`~magnetar.bookie.errors.CookieMismatch` (BookKeeper's cookie validation).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

from magnetar.bookie.errors import CookieMismatch
from magnetar.bookie_protocol.layout import COOKIES_PATH
from magnetar.metadata.store import MetadataStore, NodeExists, NotFound


async def check_cookie(data_dir: Path, bookie_id: str, metadata: MetadataStore | None) -> None:
    """Check (or, on the first start, write) the cookie on disk and in the store (none
    without a store). Raises :class:`CookieMismatch`."""
    path = data_dir / "cookie"
    local: dict[str, str] | None = None
    if path.exists():
        local = json.loads(path.read_text())
        if local.get("bookie_id") != bookie_id:
            raise CookieMismatch(
                f"data dir {data_dir} belongs to bookie {local.get('bookie_id')}, not {bookie_id}"
            )
    remote: dict[str, str] | None = None
    node = f"{COOKIES_PATH}/{bookie_id}"
    if metadata is not None:
        try:
            remote = json.loads((await metadata.get(node)).value)
        except NotFound:
            remote = None
    if local is not None and remote is not None and local != remote:
        raise CookieMismatch(
            f"cookie of {bookie_id} in the metadata store names data dir instance "
            f"{remote.get('instance_id')}, but {data_dir} is {local.get('instance_id')}"
        )
    if local is None and remote is not None:
        raise CookieMismatch(
            f"bookie {bookie_id} is registered with another data dir "
            f"(instance {remote.get('instance_id')}); {data_dir} has no cookie"
        )
    if local is None:
        local = {"bookie_id": bookie_id, "instance_id": uuid.uuid4().hex}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(local))
        tmp.replace(path)
    if remote is None and metadata is not None:
        with contextlib.suppress(NodeExists):
            await metadata.put(node, json.dumps(local).encode(), -1)
