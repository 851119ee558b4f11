"""``magnetar`` imports a sub-command's module only when that sub-command runs, so
``magnetar standalone`` starts without the admin, client, perf and functions command trees."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from magnetar.cli.main import LAZY_COMMANDS, cli

OTHER_COMMAND_MODULES = (
    "magnetar.cli.admin_cmd",
    "magnetar.cli.client_cmd",
    "magnetar.cli.perf_cmd",
    "magnetar.cli.functions_cmd",
    "magnetar.cli.tokens_cmd",
    "magnetar.cli.local_cluster_cmd",
    "magnetar.cli.bookie_cmd",
    "magnetar.cli.broker_cmd",
)

PROBE = """
import sys
from magnetar.cli.main import main
sys.argv = ["magnetar", "standalone", "--help"]
try:
    main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
print(" ".join(sorted(m for m in sys.modules if m.startswith("magnetar."))))
"""


def test_standalone_imports_no_other_command_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stdout.split("\n")[-2].split())
    assert "magnetar.cli.standalone_cmd" in loaded
    assert loaded.isdisjoint(OTHER_COMMAND_MODULES), loaded & set(OTHER_COMMAND_MODULES)


def test_every_command_resolves_to_its_own_name() -> None:
    ctx = click.Context(cli)
    for name in LAZY_COMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name, name
    assert cli.get_command(ctx, "no-such-command") is None


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line}
    assert listed == {*LAZY_COMMANDS, "functions-worker"}
