"""``docs/pulsar-differences.md`` stays true to the ``magnetar`` command tree: every command
present is listed as done or different, every command listed as done or different exists,
and no command listed as not yet exists."""

from __future__ import annotations

import re
from pathlib import Path

import click

from magnetar.cli.main import cli

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pulsar-differences.md"
ROW = re.compile(r"^\| `magnetar ([a-zA-Z0-9 -]+)` \| (done|different|not yet) \|")


def _commands(group: click.Group, ctx: click.Context, path: str) -> dict[str, click.Command]:
    """Every command under ``group`` by its path (``admin topics list``), groups included."""
    found: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        full = f"{path} {name}".strip()
        found[full] = command
        if isinstance(command, click.Group):
            sub_ctx = click.Context(command, parent=ctx, info_name=name)
            found.update(_commands(command, sub_ctx, full))
    return found


def _listed() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in PAGE.read_text().splitlines():
        match = ROW.match(line)
        if match:
            command, state = match.groups()
            assert command not in rows, f"{command} is listed twice"
            rows[command] = state
    return rows


def test_the_page_lists_every_command_and_only_those() -> None:
    present = _commands(cli, click.Context(cli, info_name="magnetar"), "")
    leaves = {path for path, c in present.items() if not isinstance(c, click.Group)}
    listed = _listed()
    assert len(listed) > 200

    unlisted = sorted(leaves - set(listed))
    assert unlisted == [], f"add these to {PAGE.name}: {unlisted}"
    missing = sorted(c for c, state in listed.items() if state != "not yet" and c not in leaves)
    assert missing == [], f"listed as done or different but absent: {missing}"
    built = sorted(c for c, state in listed.items() if state == "not yet" and c in present)
    assert built == [], f"listed as not yet but present (update the page): {built}"
