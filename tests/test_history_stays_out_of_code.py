"""History lives in CHANGELOG.md and git, not in the code a reader or a user meets.

A comment that names an issue ("added for issue 28") tells a reader when, not why, and a
message that names one ("a build from before issue 28") tells a user nothing they can act
on. This fails on either, naming the file and line. A reference to another project's bug
(`owner/repo#123`) says why a workaround exists, and stays.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The package, and a deployment's own code beside it.
SOURCES = ["agentledger", "workflows", "activities", "worker.py", "starter.py"]
# `#41` in prose; not a colour such as `#999;` or `stroke="#333"`.
ISSUE_NUMBER = re.compile(r"\bissues? \d+|(?<![\w/.-])#\d{2,}(?![\w;\"'])", re.IGNORECASE)


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_no_issue_number_in_code_comments_or_messages():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in source_files()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if ISSUE_NUMBER.search(line)
    ]
    assert not found, "history belongs in CHANGELOG.md: " + "; ".join(found)


def test_the_check_sees_an_issue_number_and_passes_another_projects_bug():
    assert ISSUE_NUMBER.search("# kept for issue 28")
    assert ISSUE_NUMBER.search('raise SetupError("a build from before Issue 7")')
    assert ISSUE_NUMBER.search("# see #41")
    assert not ISSUE_NUMBER.search("# teardown (SIGABRT, temporalio/sdk-python#300)")
    assert not ISSUE_NUMBER.search('color = "#36c"')
    assert not ISSUE_NUMBER.search("td{border:1px solid #999;padding:4px}")
    assert not ISSUE_NUMBER.search('<line stroke="#333"/>')
