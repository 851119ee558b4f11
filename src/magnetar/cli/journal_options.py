"""The bookie journal's flags that ``magnetar bookie`` and ``magnetar standalone`` both
declare (the standalone's in-process bookie takes them as a bookie does): one declaration,
one help text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

_OPTIONS: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    click.option(
        "--journal-skip-invalid-records/--no-journal-skip-invalid-records",
        default=False,  # BookieConfig.journal_skip_invalid_records
        show_default=True,
        help="Start even if the bookie's journal replay finds a damaged record followed by "
        "valid ones (skips and logs it; its entries are lost on this bookie). Default: "
        "refuse to start.",
    ),
    click.option(
        "--journal-reuse-files/--no-journal-reuse-files",
        default=True,  # BookieConfig.journal_reuse_files
        show_default=True,
        help="Keep a checkpointed journal file and write the next one over it (syncs then "
        "write data only; costs the disk space of one journal file).",
    ),
)


def journal_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Declare the journal flags on a command (``journal_skip_invalid_records``,
    ``journal_reuse_files``), in this order in its help."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f
