"""The project's first name, `agentrun`, remains only where docs/versioning.md lists it: names
Temporal and the database hold, and the warning that names an old variable's new one."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The page that lists the names, the history of the project, which says what it was called, and
# this check, which spells the name it looks for.
WHERE_THE_NAME_IS_HISTORY = {"docs/versioning.md", "CHANGELOG.md", "tests/test_former_name.py"}
# The old name as it was written: `agentrun`, `Agentrun...`, `AGENTRUN_` (`AgentRun` is the
# workflow's name, "an agent's run", not the project's).
FORMER = re.compile(r"[\w.~/-]*(?:agentrun|Agentrun|AGENTRUN)[\w-]*(?: vault)?")


def listed_names() -> list[str]:
    """The first column of docs/versioning.md's table of names that keep the first name."""
    page = (ROOT / "docs/versioning.md").read_text()
    section = page.split("## Names from before the rename", 1)[1]
    return [
        name
        for row in section.splitlines()
        if row.startswith("| ")
        for name in re.findall(r"`([^`]+)`", row.split("|")[1])
    ]


def test_the_first_name_remains_only_where_the_versioning_page_lists_it() -> None:
    names = listed_names()
    assert "agentrun_step_output" in names and "AGENTRUN_*" in names, names
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    unlisted = []
    for path in files:
        if path in WHERE_THE_NAME_IS_HISTORY or any(fnmatch.fnmatch(path, n) for n in names):
            continue
        try:
            text = (ROOT / path).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # a binary file, or one deleted in the work tree
        for found in FORMER.findall(text):
            if not any(fnmatch.fnmatch(found, n) for n in names):
                unlisted.append(f"{path}: {found}")
    assert not unlisted, unlisted


def test_agentledger_never_imports_a_package_named_agentrun(tmp_path: Path) -> None:
    """Alibaba Cloud's `agentrun-sdk` installs an `agentrun` import root: agentledger, its
    command line and its worker import beside one (here one that fails if imported)."""
    planted = tmp_path / "agentrun"
    planted.mkdir()
    (planted / "__init__.py").write_text("raise ImportError('agentledger imported agentrun')\n")
    code = (
        "import sys, agentledger, agentledger.cli.main, agentledger.worker.main\n"
        "from agentledger import RunClient, AgentLedgerPlugin\n"
        "assert 'agentrun' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,  # `agentrun` is importable from here, as an installed one would be
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
