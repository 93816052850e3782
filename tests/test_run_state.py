"""A run's state is declared once (RunProgress) and carried whole across continue-as-new.

A field a handler or a step sets outside RunProgress would be lost when the run continues
as new (a pause accepted just before it once was); these tests fail on such a field, and
on a RunProgress field that does not survive the carry's trip through Temporal.
"""

from __future__ import annotations

import ast
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import PublisherState, WorkflowStreamState
from temporalio.contrib.workflow_streams._types import _WorkflowStreamWireItem

from agentledger.core._state import RunInput, RunProgress
from agentledger.core.results import (
    ApprovalRecord,
    CheckOutcome,
    ChildApproval,
    LeftInMirror,
    PendingApproval,
    RefusedDecision,
    RunMessage,
    SessionTurn,
    SideEffectRecord,
    StepSummary,
    VerifyResult,
)
from agentledger.core.spec import Budget
from agentledger.core.states import RunStatus
from agentledger.core.wire import ApproveInput
from agentledger.workflows import AgentRunWorkflow, run_state
from tests.support import parse_python

WORKFLOW_DIR = Path(__file__).parent.parent / "agentledger" / "workflows"


def components(cls: type) -> set[type]:
    """The classes of the workflow's package its `__init__` builds: its components."""
    module = sys.modules[cls.__module__]
    init = next(
        node
        for node in ast.walk(
            parse_python((WORKFLOW_DIR / f"{cls.__module__.split('.')[-1]}.py").read_text())
        )
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    called = {
        vars(module).get(node.func.id)
        for node in ast.walk(init)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    return {
        c
        for c in called
        if isinstance(c, type) and c.__module__.startswith("agentledger.workflows")
    }


def attributes_written(cls: type) -> dict[str, set[str]]:
    """Each `self.<name>` the class, its bases and its components assign, with the methods
    that do it."""
    modules = {
        base.__module__
        for klass in {cls, *components(cls)}
        for base in klass.__mro__
        if base.__module__.startswith("agentledger.workflows")
    }
    written: dict[str, set[str]] = {}
    for module in modules:
        tree = parse_python((WORKFLOW_DIR / f"{module.split('.')[-1]}.py").read_text())
        for method in ast.walk(tree):
            if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(method):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                    targets = [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if (
                            isinstance(leaf, ast.Attribute)
                            and isinstance(leaf.value, ast.Name)
                            and leaf.value.id == "self"
                        ):
                            written.setdefault(leaf.attr, set()).add(method.name)
    return written


def test_the_run_keeps_its_state_only_in_run_progress():
    assert {c.__name__ for c in components(AgentRunWorkflow)} >= {
        "Recorder",
        "Approvals",
        "Steering",
        "Sessions",
        "Subagents",
    }, "the parse found the workflow's components"
    written = attributes_written(AgentRunWorkflow)
    assert {"progress", "pending_steps", "running_child"} <= set(written), (
        "the parse found the attributes of the workflow and of its components"
    )
    stray = {
        name: methods for name, methods in written.items() if name not in run_state.WORKFLOW_ONLY
    }
    assert not stray, (
        f"{stray} set outside RunProgress: declare the field in "
        "agentledger.core._state.RunProgress so it is carried across continue-as-new (or, if a "
        "continuation truly does without it, add it to workflows.run_state.WORKFLOW_ONLY "
        "with the reason)"
    )


def test_handlers_change_only_declared_state():
    """What signals and updates set (pause, approvals) lands in RunProgress fields."""
    tree_fields: set[str] = set()
    for name in ("approvals", "run_messages"):
        tree = parse_python((WORKFLOW_DIR / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "progress"
                and isinstance(node.ctx, ast.Store)
            ):
                tree_fields.add(node.attr)
    assert {"pause_requested", "decision"} <= tree_fields
    assert tree_fields <= set(RunProgress.model_fields)


def every_field_set() -> RunProgress:
    """A RunProgress with no field at its default, as a long run might have it."""
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return RunProgress(
        generation=2,
        status=RunStatus.WAITING_FOR_APPROVAL,
        started_at=now,
        finished_at=now + timedelta(hours=1),
        seq=7,
        version=12,
        event_seq=30,
        current_step_id="0007-approval",
        model_calls=3,
        verify_rounds=1,
        steps=[
            StepSummary(
                step_id="0001-model_call", seq=1, type="model_call", name="m", status="completed"
            )
        ],
        stored_messages=5,
        admitted=False,
        pending_messages=[{"role": "user", "content": "again"}],
        model_used="primary",
        model_choice=1,
        checkpoint={"cursor": 3},
        tokens_in=100,
        tokens_out=50,
        cost_usd=0.25,
        unpriced_models=["self-hosted-model"],
        children=["run-~sub.run-x~0002-tool_call"],
        child_approvals=[
            ChildApproval(
                run_id="run-~sub.run-x~0002-tool_call",
                approval=PendingApproval(
                    approval_id="0003-approval",
                    step_id="0003-approval",
                    tool="send_message",
                    arguments={"to": "ana@example.com"},
                    action_hash="h",
                    required_role="approver",
                    tenant="t",
                    requested_at=now,
                    expires_at=now,
                ),
            )
        ],
        messages=[
            RunMessage(
                message_id="m1",
                text="Use the 2025 policy.",
                by="ana",
                received_at=now,
                taken_at=now,
                taken_before_step=3,
                interrupted_step="0002-model_call",
            )
        ],
        turns=[
            SessionTurn(
                turn=1,
                message_ids=["m1"],
                asked="Use the 2025 policy.",
                answer="## Summary",
                answer_chars=10,
                first_step=1,
                last_step=3,
                model_calls=1,
                tokens=150,
                cost_usd=0.25,
                started_at=now,
                answered_at=now,
                first_message=3,
            )
        ],
        turn_start=(3, 150, 0.25),
        idle_since=now,
        summary="they asked about refunds",
        summary_keeps_from=3,
        summarised_turns=1,
        compacted_at_turn=2,
        summaries=1,
        paused_by="li",
        forgotten=[(3, 9)],
        end_requested_by="mo",
        model_calls_rated=True,
        left_in_mirror=LeftInMirror(turns=3, messages=40, steps=12),
        duplicates_prevented=1,
        inherited_effects=["a" * 32],
        side_effects=[
            SideEffectRecord(
                step_id="0003-tool_call",
                tool="send",
                idempotency_key="k",
                arguments={"to": "x"},
                ok=True,
                duplicate_prevented=False,
            )
        ],
        approvals=[
            ApprovalRecord(
                approval_id="0002-approval",
                tool="send",
                proposed_arguments={},
                decision="approved",
                requested_at=now,
                decided_at=now,
            )
        ],
        pending_approval=PendingApproval(
            approval_id="0007-approval",
            step_id="0007-approval",
            tool="send",
            arguments={"to": "y"},
            action_hash="h",
            required_role="approver",
            tenant="t",
            requested_at=now,
            expires_at=now + timedelta(days=1),
        ),
        decision=ApproveInput(action_hash="h", by="ann", role="approver", edit={"to": "z"}),
        refusals=[RefusedDecision(approval_id="0007-approval", by="eve", reason="x", at=now)],
        pause_requested=True,
        pause_reason="model provider refused",
        verification=VerifyResult(passed=False, checks=[CheckOutcome(name="c", passed=False)]),
        unresolved=["0004-tool_call: send failed"],
        budget=Budget(max_tokens=1000),
        malformed_streak=1,
        argument_streak=2,
        answer="## Summary",
        error="late",
        stream_state=WorkflowStreamState(
            log=[_WorkflowStreamWireItem(topic="events", data="e30=", offset=0)],
            base_offset=3,
            publishers={"p1": PublisherState(sequence=4, last_seen=now)},
        ),
    )


def test_every_field_survives_continue_as_new():
    progress = every_field_set()
    defaults = RunProgress(started_at=datetime(2000, 1, 1, tzinfo=UTC))
    at_default = [
        n for n in RunProgress.model_fields if getattr(progress, n) == getattr(defaults, n)
    ]
    assert not at_default, f"give {at_default} a value in every_field_set()"

    spec = RunInput(task="t", carry=run_state.carry(progress))
    converter = pydantic_data_converter.payload_converter
    received = converter.from_payloads(converter.to_payloads([spec]), [RunInput])[0]

    assert received.carry == progress.model_copy(update={"generation": 3})
