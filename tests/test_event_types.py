"""Every kind of event, and every step status, is named once (agentledger/core/events.py,
`EventType`; agentledger/core/states.py, `StepStatus`): the recorder takes the enum, and no
writer or reader spells one as a string of its own, so a renamed or mistyped event cannot
pass unnoticed between the workflow that records it and the face that reads it."""

from __future__ import annotations

import ast
from pathlib import Path

from agentledger.core.events import EventType
from agentledger.core.states import StepStatus
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
HOMES = {ROOT / "agentledger" / "core" / "events.py", ROOT / "agentledger" / "core" / "states.py"}
SCANNED = [
    path
    for folder in ("workflows", "client", "cli", "http", "store", "core", "activities")
    for path in sorted((ROOT / "agentledger" / folder).glob("*.py"))
    if path not in HOMES
]


def spelled(source: str) -> list[tuple[int, str]]:
    """Event types written as strings in code (not in docstrings)."""
    values = {e.value for e in EventType if "." in e.value}
    tree = parse_python(source)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in values and id(node) not in docs
    ]


def test_no_module_spells_an_event_type():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in SCANNED
        for line, value in spelled(path.read_text())
    ]
    assert not found, "name it EventType.<NAME>:\n" + "\n".join(found)


def test_each_step_end_has_its_event():
    """A step's record and its event say the same status (`step.<status>`)."""
    reported = (StepStatus.ATTEMPT_SUCCEEDED, StepStatus.ATTEMPT_FAILED)  # no event: the mirror's
    ended = [s for s in StepStatus if s not in (StepStatus.RUNNING, StepStatus.WAITING, *reported)]
    assert [EventType.step_ended(s) for s in ended] == [EventType(f"step.{s}") for s in ended]
    assert EventType.decided("approved") == EventType.APPROVAL_APPROVED
