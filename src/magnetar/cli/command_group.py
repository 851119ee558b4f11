"""The click group every ``magnetar`` command group is built on.

:class:`SuggestingGroup` answers an unknown sub-command with the closest names, at every
level (``magnetar standalon``, ``magnetar admin topcs``, ``magnetar admin topics lst``):
``Error: No such command 'standalon'. Did you mean 'standalone'?``, exit status 2 (a usage
error). Candidates come from :meth:`click.Group.list_commands`, so groups that import their
sub-commands on first use (the root) are covered without importing anything.
"""

from __future__ import annotations

from typing import Final

import click

SUGGESTIONS_MAX: Final = 3
SIMILARITY_MIN: Final = 0.6
"""difflib's ratio a name must reach to be suggested (its default cut-off)."""


def did_you_mean(name: str, candidates: list[str]) -> str:
    """``Did you mean 'x'?`` / ``Did you mean one of 'x', 'y'?``; empty when none is close."""
    import difflib  # only for a misspelt name

    close = difflib.get_close_matches(name, candidates, n=SUGGESTIONS_MAX, cutoff=SIMILARITY_MIN)
    if not close:
        return ""
    if len(close) == 1:
        return f"Did you mean {close[0]!r}?"
    return "Did you mean one of " + ", ".join(repr(c) for c in close) + "?"


class SuggestingGroup(click.Group):
    """A :class:`click.Group` whose unknown sub-commands get suggestions; sub-groups made
    with :meth:`group` are of the same class."""

    group_class = type

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0]) if args else ""
        if (
            name
            and not name.startswith("-")
            and not ctx.resilient_parsing
            and self.get_command(ctx, name) is None
        ):
            hint = did_you_mean(name, self.list_commands(ctx))
            if hint:
                raise click.UsageError(f"No such command {name!r}. {hint}", ctx)
        return super().resolve_command(ctx, args)
