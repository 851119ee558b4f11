"""The docs quote one start-up figure, the one ``benchmarks/startup.py`` measured (they once
said "well under a second", "about 0.5 s" and "about 180 ms")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"ready (\d[\d.]*\u2013\d[\d.]* s after the process starts \([^)]*\))")
QUOTING = ["README.md", "docs/admin.md", "docs/broker.md"]
STALE = ["well under a second", "about 0.5 s", "about 180 ms", "0.6\u20130.7 s from process start"]


def test_every_doc_quotes_the_benchmarks_start_up_figure() -> None:
    figures = {}
    for name in QUOTING:
        text = " ".join((REPO / name).read_text().split())  # line breaks as spaces
        found = FIGURE.findall(text)
        assert found, f"{name} quotes no start-up figure"
        assert "benchmarks/startup.py" in text, name
        figures[name] = set(found)
        for stale in STALE:
            assert stale not in text, (name, stale)
    assert len(set.union(*figures.values())) == 1, figures
