"""The docs quote one start-up figure: the README's table row, measured by
``benchmarks/startup.py`` (they once said "well under a second", "about 0.5 s", "about 180 ms"
and carried dated figures on three pages that drifted apart)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README_ROW = re.compile(
    r"^\| standalone ready after the process starts[^|]*\| [\d.]+ s .*benchmarks/startup\.py", re.M
)
FIGURE_ELSEWHERE = re.compile(r"ready \d[\d.]*(?:\u2013\d[\d.]*)? s after the process starts")
STALE = ["well under a second", "about 0.5 s", "about 180 ms", "0.6\u20130.7 s from process start"]
REFERENCE_PAGES = [
    "ARCHITECTURE.md",
    "CONTRIBUTING.md",
    *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md") if p.name != "perf-log.md"),
]


def test_the_readme_quotes_the_start_up_figure_once_with_its_command() -> None:
    text = (REPO / "README.md").read_text()
    assert len(README_ROW.findall(text)) == 1


def test_no_reference_page_quotes_a_start_up_figure_of_its_own() -> None:
    for name in REFERENCE_PAGES:
        path = REPO / name
        if not path.exists():
            continue
        text = " ".join(path.read_text().split())
        assert not FIGURE_ELSEWHERE.search(text), name
        for stale in STALE:
            assert stale not in text, (name, stale)
