"""One way for a workflow to start a run: every child workflow the engine's
workflows start goes through agentledger/workflows/run_starts.py, which takes only a run input
carrying its tenant's policy, so the next way to start a run cannot skip the policy."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import parse_python

WORKFLOWS = Path(__file__).resolve().parent.parent / "agentledger" / "workflows"
PRIMITIVE = "run_starts.py"
# Every SDK call that starts a child workflow.
CHILD_STARTS = {"start_child_workflow", "execute_child_workflow"}


def _calls(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            found.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return found


def _modules() -> dict[str, list[str]]:
    return {p.name: _calls(parse_python(p.read_text())) for p in sorted(WORKFLOWS.glob("*.py"))}


def test_only_the_one_primitive_starts_a_child_run():
    calls = _modules()
    starting = sorted(name for name, found in calls.items() if CHILD_STARTS & set(found))
    assert starting == [PRIMITIVE], (
        f"{starting}: a workflow starts a run only through run_starts.start_run, which applies "
        "its tenant's policy"
    )
    assert calls[PRIMITIVE].count("start_child_workflow") == 1


def test_every_engine_path_that_starts_a_run_uses_it():
    """Sub-agents, `run_agent`, backlogs, the admission queue and a schedule's fires each
    call `start_run`; a policy-carrying input is made in the primitive's module alone."""
    calls = _modules()
    users = sorted(n for n, found in calls.items() if "start_run" in found and n != PRIMITIVE)
    assert users == [
        "admission.py",
        "backlog.py",
        "child_runs.py",
        "scheduled_fires.py",
        "subagents.py",
    ]
    makers = sorted(n for n, found in calls.items() if "PolicyApplied" in found)
    assert makers == [PRIMITIVE]
