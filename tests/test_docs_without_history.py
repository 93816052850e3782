"""The docs say what is, not how it came to be: history (issue numbers) lives in CHANGELOG.md
and git, and the record of past bench runs in docs/bench/ (docs/bench/history.md), which
docs/benchmarks.md links to. Code blocks are examples (a backlog task may fix an issue)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = re.compile(r"\bissues? #?\d+\b", re.I)


def prose(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside code blocks, numbered."""
    lines, in_code = [], False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code:
            lines.append((number, line))
    return lines


def test_no_page_tells_the_projects_history() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        for number, line in prose(page)
        if HISTORY.search(line)
    ]
    assert not found, "history belongs in CHANGELOG.md or docs/bench/:\n" + "\n".join(found)


def test_the_benchmarks_page_links_the_latest_figures_and_the_history() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    for target in ("latest.md", "http-stream.md", "levers.md", "history.md"):
        assert re.search(rf"\]\(bench/{re.escape(target)}(?:#[\w-]+)?\)", page), target
