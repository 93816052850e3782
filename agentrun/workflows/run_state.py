"""A run's state and what is derived from it.

The state itself is one model, `agentrun.core._state.RunProgress`: the workflow keeps all it
knows there, so the continue-as-new carry is that model whole, and the mirror snapshot,
the `state` query and the receipt below are projections of it. A workflow attribute that
is not in it must be listed in WORKFLOW_ONLY with the reason a continuation does not need
it (tests/test_run_state.py enforces both).
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentrun.core import bounds
    from agentrun.core._state import RunInput, RunProgress
    from agentrun.core._wire import RunSnapshot
    from agentrun.core.results import DecisionSeen, Receipt, RunState
    from agentrun.core.states import RunStatus

# The decided approvals the state query lists (a query adds nothing to history).
DECISIONS_SHOWN = 10

# The workflow's own attributes besides `progress`, and why a continuation does without.
WORKFLOW_ONLY = {
    "spec": "the run's input: the continuation is started with it again",
    "run_id": "the workflow id, the same for every continuation",
    "changes": "read from the run's input (its generation); a continuation reads it again",
    "indexed_status": "read from the search attributes, which a continuation inherits",
    "progress": "the declared state itself, carried whole",
    "pending_steps": "mirror rows not sent yet: a run flushes them before it continues",
    "pending_events": "mirror events not sent yet: flushed like pending_steps",
    "mirror_writes": "mirror writes in flight: a run waits for them before it continues",
    "stream": "the live stream: its log goes along in progress.stream_state at continue-as-new",
    "running_child": "set while a sub-agent's run is awaited: a run continues only between steps",
    "forwards": "pauses and resumes on their way to that child: sent within its step",
}


class RunEnded(Exception):
    """Raised inside the loop to end the run with a given status and reason."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def carry(progress: RunProgress) -> RunProgress:
    """What the next generation of the run starts from."""
    return progress.model_copy(update={"generation": progress.generation + 1})


def snapshot(
    run_id: str, spec: RunInput, progress: RunProgress, now: datetime, priority: int
) -> RunSnapshot:
    """The mirror's run row."""
    return RunSnapshot(
        run_id=run_id,
        version=progress.version,
        agent=spec.agent,
        profile_hash=spec.profile_hash,
        tenant=spec.tenant,
        user=spec.user,
        task=spec.task,
        priority=priority,
        status=progress.status,
        current_step_id=progress.current_step_id,
        pause_reason=progress.pause_reason,
        model=progress.model_used,
        tokens_in=progress.tokens_in,
        tokens_out=progress.tokens_out,
        cost_usd=progress.cost_usd,
        duplicates_prevented=progress.duplicates_prevented,
        checkpoint=progress.checkpoint,
        result=progress.answer,
        error=progress.error,
        created_at=progress.started_at,
        updated_at=now,
        finished_at=progress.finished_at,
    )


def state_view(run_id: str, spec: RunInput, progress: RunProgress, priority: int) -> RunState:
    """What the `state` query answers."""
    return RunState(
        run_id=run_id,
        status=progress.status,
        tenant=spec.tenant,
        user=spec.user,
        task=spec.task,
        current_step_id=progress.current_step_id,
        steps=progress.steps,
        pending_approval=progress.pending_approval,
        pause_requested=progress.pause_requested,
        pause_reason=progress.pause_reason,
        checkpoint=progress.checkpoint,
        tokens_in=progress.tokens_in,
        tokens_out=progress.tokens_out,
        cost_usd=progress.cost_usd,
        result=progress.answer,
        error=progress.error,
        priority=priority,
        admission=spec.admission,
        refusals=progress.refusals,
        decided=[
            DecisionSeen(approval_id=a.approval_id, decision=a.decision, by=a.by)
            for a in progress.approvals[-DECISIONS_SHOWN:]
        ],
        # Excerpts: a query's answer must fit Temporal's payload limit whatever was said.
        messages=[m.model_copy(update={"text": bounds.excerpt(m.text)}) for m in progress.messages],
        children=progress.children,
        child_approvals=progress.child_approvals,
        turns=progress.turns,
        left_in_mirror=progress.left_in_mirror,
    )


def receipt(run_id: str, spec: RunInput, progress: RunProgress, now: datetime) -> Receipt:
    """The run's receipt, covering every generation of it."""
    return Receipt(
        run_id=run_id,
        agent=spec.agent,
        profile_hash=spec.profile_hash,
        task=spec.task,
        tenant=spec.tenant,
        user=spec.user,
        outcome=progress.status,
        answer=progress.answer,
        error=progress.error,
        steps=progress.steps,
        side_effects=progress.side_effects,
        approvals=progress.approvals,
        retries=[],
        duplicates_prevented=progress.duplicates_prevented,
        tokens_in=progress.tokens_in,
        tokens_out=progress.tokens_out,
        cost_usd=progress.cost_usd,
        unpriced_models=list(progress.unpriced_models),
        verification=progress.verification,
        unresolved=progress.unresolved,
        started_at=progress.started_at,
        finished_at=progress.finished_at or now,
        forked_from=spec.fork,
        messages=progress.messages,
        parent_run_id=spec.parent_run_id,
        children=progress.children,
        turns=progress.turns,
        summaries=progress.summaries,
        left_in_mirror=progress.left_in_mirror,
    )
