"""The run workflow's components are plain classes: built with a run's context and asked,
with no worker, no Temporal server and no workflow around them.

Each is what AgentRunWorkflow builds in its `__init__` (agentledger/workflows/agent_run.py);
here one is built the same way over a `RunProgress` the test sets, and its decisions are
read back: a decision that does not fit is refused and nothing of it is recorded; a resume
of a run not paused is refused; a call is a sub-agent's only for the agents the spec names;
a session's step limit counts per turn.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError

from agentledger.core._state import RunInput, RunProgress
from agentledger.core.results import PendingApproval
from agentledger.core.states import RunStatus
from agentledger.core.wire import (
    ApproveInput,
    ControlInput,
    ProposedToolCall,
    RejectInput,
    RunEvent,
)
from agentledger.workflows.approvals import Approvals
from agentledger.workflows.changes import Changes, for_new_run
from agentledger.workflows.recording import Recorder, RunContext
from agentledger.workflows.run_messages import RunControls
from agentledger.workflows.sessions import Sessions
from agentledger.workflows.steering import Steering
from agentledger.workflows.subagents import Subagents

RUN_ID = "run-component"
T0 = datetime(2026, 12, 4, tzinfo=UTC)


def current(run: RunContext) -> Changes:
    """The changes a run started now takes."""
    return Changes(for_new_run(run.spec).workflow_generation)


def context(spec: RunInput, progress: RunProgress) -> tuple[RunContext, list[RunEvent]]:
    """The context AgentRunWorkflow builds its components with; its live events land in a list."""
    published: list[RunEvent] = []
    recorder = Recorder(spec, RUN_ID, progress, published.append, indexed_status=None)
    return RunContext(spec, RUN_ID, progress, recorder), published


def waiting_for_approval() -> RunProgress:
    progress = RunProgress(started_at=T0, status=RunStatus.WAITING_FOR_APPROVAL)
    progress.pending_approval = PendingApproval(
        approval_id="0002-approval",
        step_id="0002-approval",
        tool="refund",
        arguments={"amount": 40},
        action_hash="hash-of-the-refund",
        required_role="finance",
        approvers=["alice"],
        tenant="acme",
        requested_at=T0,
        expires_at=T0 + timedelta(hours=1),
    )
    return progress


async def no_parent(_: PendingApproval | None) -> None:
    """A top-level run has no parent to tell of its approvals."""


@pytest.mark.parametrize(
    ("decision", "refusal"),
    [
        (
            ApproveInput(action_hash="stale", by="alice", role="finance", tenant="acme"),
            "stale approval: the pending action is hash-of-the-refund (refund), not stale; "
            "run `status` and decide again",
        ),
        (
            ApproveInput(action_hash="hash-of-the-refund", by="alice", role="finance", tenant="x"),
            f"run {RUN_ID} belongs to another tenant",
        ),
        (
            RejectInput(action_hash="hash-of-the-refund", by="alice", role="ops", reason="no"),
            "alice has role 'ops', but refund needs role 'finance'",
        ),
        (
            ApproveInput(action_hash="hash-of-the-refund", by="mallory", role="finance"),
            "mallory is not among the approvers for this run",
        ),
    ],
)
def test_approvals_refuse_a_decision_that_does_not_fit_and_record_nothing(
    decision: ApproveInput | RejectInput, refusal: str
):
    progress = waiting_for_approval()
    run, published = context(RunInput(task="refund order 7", tenant="acme"), progress)
    approvals = Approvals(run, no_parent, current(run))
    with pytest.raises(ApplicationError) as refused:
        approvals.validate(decision)
    assert refused.value.message == refusal
    assert progress.decision is None and progress.refusals == []
    assert published == [] and run.recorder.pending_events == []


def test_approvals_refuse_a_decision_for_a_run_that_waits_for_none():
    progress = RunProgress(started_at=T0, status=RunStatus.PLANNING)
    run, _ = context(RunInput(task="t"), progress)
    decision = ApproveInput(action_hash="h", by="alice", role="finance")
    not_waiting = r"is not waiting for an approval \(status planning\)"
    with pytest.raises(ApplicationError, match=not_waiting):
        Approvals(run, no_parent, current(run)).validate(decision)
    progress.status = RunStatus.COMPLETED
    with pytest.raises(ApplicationError, match=f"run {RUN_ID} already ended as completed"):
        Approvals(run, no_parent, current(run)).validate(decision)


def test_run_controls_refuse_a_resume_of_a_run_not_paused_and_a_pause_of_an_ended_one():
    progress = RunProgress(started_at=T0, status=RunStatus.PLANNING)
    run, _ = context(RunInput(task="t"), progress)
    forwarded: list[str] = []
    controls = RunControls(run, lambda signal, _: forwarded.append(signal))
    with pytest.raises(ApplicationError, match=r"is not paused \(status planning\)"):
        controls.validate_resume(ControlInput(by="ops"))
    progress.status = RunStatus.FAILED
    with pytest.raises(ApplicationError, match="already ended as failed"):
        controls.validate_pause(ControlInput(by="ops"))
    assert forwarded == [] and not progress.pause_requested


def test_subagents_take_only_the_calls_for_the_agents_the_spec_names():
    spec = RunInput(task="t", subagents={"researcher": {"task": "-"}})
    run, _ = context(spec, RunProgress(started_at=T0))
    subagents = Subagents(run)
    assert subagents.tools() == {"subagents": ["researcher"]}
    assert subagents.is_call(ProposedToolCall(call_id="c1", tool="agent__researcher"))
    assert not subagents.is_call(ProposedToolCall(call_id="c2", tool="agent__writer"))
    assert Subagents(context(RunInput(task="t"), RunProgress(started_at=T0))[0]).tools() == {}


def test_a_sessions_step_limit_counts_the_model_calls_of_its_turn_only():
    spec = RunInput(task="t", max_steps=3, session={"idle_timeout": 60})
    progress = RunProgress(started_at=T0, model_calls=10, turn_start=(8, 0, 0.0))
    run, _ = context(spec, progress)

    async def never_continues() -> None:
        raise AssertionError("no continue-as-new is asked of a step limit")

    sessions = Sessions(run, Steering(run, current(run)), never_continues)
    assert sessions.calls_left()  # two calls of this turn's three
    progress.model_calls = 11
    assert not sessions.calls_left()
    one_shot, _ = context(RunInput(task="t", max_steps=3), progress)
    assert not Sessions(
        one_shot, Steering(one_shot, current(one_shot)), never_continues
    ).calls_left()
