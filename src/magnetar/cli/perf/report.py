"""Printing a perf run: one line (or a live table row) per window, and the summary.

On a terminal (and ``--output text``) windows accumulate in a rich live table; otherwise
each window is one plain line on stdout in ``pulsar-perf``'s spirit::

    Throughput produced:   10021.3 msg/s ---   9.79 MB/s --- errors 0 --- Latency ms: mean 3.1 - p50 2.9 - p95 5.2 - p99 7.7 - p99.9 9.4 - max 11.2

With ``--output json`` the windows are not printed (stderr gets nothing either) and the
summary is one JSON document on stdout; ``--json-file`` writes it to a file in any mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from magnetar.cli.output import Printer
from magnetar.cli.perf.meter import Report

#: Rows kept in the live table (older windows scroll away).
LIVE_ROWS_MAX = 15


def latency_text(r: Report) -> str:
    lat = r.latency_ms
    return (
        f"mean {lat.mean:.3f} - p50 {lat.p50:.3f} - p95 {lat.p95:.3f} - p99 {lat.p99:.3f}"
        f" - p99.9 {lat.p999:.3f} - max {lat.max:.3f}"
    )


def interval_line(verb: str, r: Report) -> str:
    return (
        f"Throughput {verb}: {r.msg_per_s:10.1f} msg/s --- {r.mb_per_s:7.2f} MB/s"
        f" --- errors {r.errors} --- Latency ms: {latency_text(r)}"
    )


class ReportPrinter:
    """Prints window reports as they come and the summary at the end."""

    def __init__(self, out: Printer, verb: str, title: str) -> None:
        self.out = out
        self.verb = verb
        self.title = title
        self._live: Any = None
        self._rows: list[tuple[str, ...]] = []
        self._total_messages = 0

    def __enter__(self) -> ReportPrinter:
        if self.out.terminal and not self.out.json:
            from rich.live import Live

            self._live = Live(self._table(), console=self.out.console(), auto_refresh=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title=self.title, title_justify="left")
        for name in (
            "elapsed s",
            "msg/s",
            "MB/s",
            "errors",
            "mean ms",
            "p50",
            "p95",
            "p99",
            "p99.9",
            "max",
            "total msgs",
        ):
            table.add_column(name, justify="right")
        for row in self._rows:
            table.add_row(*row)
        return table

    def window(self, r: Report, elapsed_total_s: float) -> None:
        self._total_messages += r.messages
        if self.out.json:
            return
        if self._live is None:
            click.echo(interval_line(self.verb, r))
            return
        lat = r.latency_ms
        self._rows.append(
            (
                f"{elapsed_total_s:.0f}", f"{r.msg_per_s:.1f}", f"{r.mb_per_s:.2f}", str(r.errors),
                f"{lat.mean:.2f}", f"{lat.p50:.2f}", f"{lat.p95:.2f}", f"{lat.p99:.2f}",
                f"{lat.p999:.2f}", f"{lat.max:.2f}", str(self._total_messages),
            )
        )  # fmt: skip
        del self._rows[:-LIVE_ROWS_MAX]
        self._live.update(self._table(), refresh=True)

    def summary(self, r: Report, extra: dict[str, Any], json_file: Path | None) -> None:
        doc = {**extra, **r.to_json()}
        if json_file is not None:
            json_file.write_text(json.dumps(doc, indent=2) + "\n")
        self.__exit__()
        if self.out.json:
            click.echo(json.dumps(doc))
            return
        if self.out.terminal:
            from rich.table import Table

            table = Table(title=f"{self.title}: summary", title_justify="left")
            table.add_column("metric")
            table.add_column("value", justify="right")
            table.add_row("messages", str(r.messages))
            table.add_row("errors", str(r.errors))
            table.add_row("duration s", f"{r.elapsed_s:.2f}")
            table.add_row("msg/s", f"{r.msg_per_s:.1f}")
            table.add_row("MB/s", f"{r.mb_per_s:.3f}")
            for label, value in (
                ("latency mean ms", r.latency_ms.mean), ("latency p50 ms", r.latency_ms.p50),
                ("latency p95 ms", r.latency_ms.p95), ("latency p99 ms", r.latency_ms.p99),
                ("latency p99.9 ms", r.latency_ms.p999), ("latency max ms", r.latency_ms.max),
            ):  # fmt: skip
                table.add_row(label, f"{value:.3f}")
            self.out.console().print(table)
            return
        click.echo(
            f"Aggregated throughput stats --- {r.messages} records {self.verb} --- "
            f"{r.msg_per_s:.1f} msg/s --- {r.mb_per_s:.3f} MB/s --- errors {r.errors}"
        )
        click.echo(f"Aggregated latency stats --- Latency ms: {latency_text(r)}")
