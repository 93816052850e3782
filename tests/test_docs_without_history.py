"""The docs say what is, not how it came to be: history (issue numbers) lives in CHANGELOG.md
and git. Measurement records keep their provenance: docs/bench/ and docs/benchmarks.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = {"docs/benchmarks.md"}
HISTORY = re.compile(
    r"\(issue \d+\)|\bissue \d+'s\b|\b(?:in|with|since|before|after|of) issue \d+|\bissues? #\d+",
    re.I,
)


def test_no_page_tells_the_projects_history() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        if str(page.relative_to(ROOT)) not in RECORDS
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if HISTORY.search(line)
    ]
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)
