"""History lives in CHANGELOG.md and git, not in the code a reader or a user meets; and a
comment says why, not which file.

A comment that names an issue ("added for issue 28") tells a reader when, not why, and a
message that names one ("a build from before issue 28") tells a user nothing they can act
on. This fails on either, naming the file and line. A reference to another project's bug
(`owner/repo#123`) says why a workaround exists, and stays.

A comment or docstring of the package (or of the deployment's code beside it) that names a
file of this repository (`agentledger/client/scope.py`, `docs/http.md`) goes stale when the
file moves, and means nothing to a reader of the installed package: it names the Python
symbol instead (`agentledger.client.scope`). A message to a user, any other string, may
still name a page of docs/, which a user of a checkout opens.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The package, and a deployment's own code beside it.
SOURCES = ["agentledger", "workflows", "activities", "worker.py", "starter.py"]
# `#41` in prose; not a colour such as `#999;` or `stroke="#333"`.
ISSUE_NUMBER = re.compile(r"\bissues? \d+|(?<![\w/.-])#\d{2,}(?![\w;\"'])", re.IGNORECASE)
# A file of this repository by its path; not `.agentledger/stack.json`, the stack's data.
REPOSITORY_PATH = re.compile(
    r"(?<![\w./-])(?:agentledger|tests|bench|scripts|docs|chaos|examples|workflows|activities)"
    r"/[\w/.-]*\.(?:py|md|json|ya?ml|sh|toml|html|js|txt)\b"
)


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


def comments_and_docstrings(source: str) -> Iterator[tuple[int, str]]:
    """Each comment and docstring in `source`, with the line it begins on."""
    docstrings = {
        node.body[0].lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and token.start[0] in docstrings
        ):
            yield token.start[0], token.string


def repository_paths(source: str) -> list[tuple[int, str]]:
    if not REPOSITORY_PATH.search(source):
        return []  # most files: no need to tokenize them
    return [
        (line, found.group(0))
        for line, text in comments_and_docstrings(source)
        for found in REPOSITORY_PATH.finditer(text)
    ]


def test_no_comment_names_a_repository_file():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {named}"
        for path in source_files()
        for line, named in repository_paths(path.read_text())
    ]
    assert not found, "name the Python symbol, not the file: " + "; ".join(found)


def test_the_check_sees_a_path_in_a_comment_or_docstring_and_passes_a_message():
    source = (
        '"""The scope (agentledger/client/scope.py)."""\n'
        "def f():\n"
        '    """See docs/http.md."""\n'
        "    x = 1  # tests/test_door.py holds it\n"
        '    raise SetupError("see docs/http.md")  # the user opens it\n'
        "# the stack's file, .agentledger/stack.json; agentledger.client.scope\n"
    )
    assert repository_paths(source) == [
        (1, "agentledger/client/scope.py"),
        (3, "docs/http.md"),
        (4, "tests/test_door.py"),
    ]
