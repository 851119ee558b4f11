"""Small things a newcomer meets in the first minutes: typo suggestions at every level of
the command tree, a key file only its owner can read, a hint when a namespace is not empty."""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid
from pathlib import Path

import click
import pytest

from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.main import LAZY_COMMANDS, cli

from .conftest import Cli


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _typo(args: tuple[str, ...]) -> str:
    """The misspelt word: the last one, or the one before a positional argument."""
    return next(a for a in reversed(args) if "/" not in a)


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (("standalon",), "'standalone'"),
        (("admin", "topcs"), "'topics'"),
        (("admin", "topics", "lst"), "'list'"),
        (("admin", "namespaces", "set-retenton", "public/default"), "'set-retention'"),
        (("client", "produc"), "'produce'"),
        (("tokens", "create-secret-ky"), "'create-secret-key'"),
    ],
)
def test_a_misspelt_command_gets_a_suggestion_at_every_level(
    args: tuple[str, ...], suggestion: str
) -> None:
    done = _magnetar(*args)
    assert done.returncode == 2, done
    assert f"Error: No such command '{_typo(args)}'" in done.stderr
    # the closest name comes first
    assert f"Did you mean {suggestion}?" in done.stderr or (
        f"Did you mean one of {suggestion}," in done.stderr
    )
    assert "Traceback" not in done.stderr


def _groups(group: click.Group, ctx: click.Context, path: str) -> list[tuple[str, click.Group]]:
    found = [(path, group)]
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        if isinstance(sub, click.Group):
            found += _groups(sub, click.Context(sub, parent=ctx, info_name=name), f"{path} {name}")
    return found


def test_every_command_group_suggests() -> None:
    ctx = click.Context(cli, info_name="magnetar")
    groups = _groups(cli, ctx, "magnetar")
    assert len(groups) > len(LAZY_COMMANDS)
    plain = [path for path, group in groups if not isinstance(group, SuggestingGroup)]
    assert plain == []


def test_create_secret_key_writes_a_file_only_its_owner_reads(tmp_path: Path) -> None:
    fresh = tmp_path / "secret.key"
    existing = tmp_path / "old.key"
    existing.write_bytes(b"x")
    existing.chmod(0o644)
    for path in (fresh, existing):
        done = _magnetar("tokens", "create-secret-key", "--output", str(path))
        assert done.returncode == 0, done
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(path.read_bytes()) == 32
    private, public = tmp_path / "my.key", tmp_path / "my.pub"
    done = _magnetar(
        "tokens", "create-key-pair",
        "--output-private-key", str(private), "--output-public-key", str(public),
    )  # fmt: skip
    assert done.returncode == 0, done
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_deleting_a_non_empty_namespace_suggests_force(cli: Cli) -> None:
    tenant = f"polish-{uuid.uuid4().hex[:6]}"
    ns = f"{tenant}/busy"
    assert cli.admin("tenants", "create", tenant).returncode == 0
    assert cli.admin("namespaces", "create", ns).returncode == 0
    assert cli.admin("topics", "create", f"persistent://{ns}/t").returncode == 0

    refused = cli.admin("namespaces", "delete", ns)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), refused.stderr
    assert "-f/--force" in lines[0] and "(HTTP 412)" in lines[0]

    assert cli.admin("namespaces", "delete", "-f", ns).returncode == 0
    assert cli.admin("tenants", "delete", tenant).returncode == 0
