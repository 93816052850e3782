"""A run's state and what is derived from it.

The state itself is one model, `agentledger.core._state.RunProgress`: the workflow keeps all it
knows there, so the continue-as-new carry is that model whole, and the mirror snapshot,
the `state` query and the receipt below are projections of it. A workflow attribute that
is not in it must be listed in WORKFLOW_ONLY with the reason a continuation does not need
it (a test enforces both).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentledger.core import bounds
    from agentledger.core._state import RunInput, RunProgress
    from agentledger.core.results import DecisionSeen, Receipt, RunState
    from agentledger.core.states import RunStatus
    from agentledger.core.wire import RunSnapshot

# The decided approvals the state query lists (a query adds nothing to history).
DECISIONS_SHOWN = 10

# The attributes of the workflow and of its components besides `progress`, and why a
# continuation does without.
WORKFLOW_ONLY = {
    "spec": "the run's input: the continuation is started with it again",
    "run_id": "the workflow id, the same for every continuation",
    "changes": "read from the run's input (its generation); a continuation reads it again",
    "generation": "the generation `changes` read from the input likewise",
    "generation_6": "a switch of `changes`, read from the input likewise",
    "charge": "whom its model calls are charged to: made from the input again",
    "double_texting": "whether a session's messages follow its policy: from the input again",
    "how": "a TurnCut's, raised and caught between two steps: never across a continuation",
    "merge_patches": "the approvals' reading of generation_6, from the input likewise",
    "standing": "the approvals' reading of generation_6 for standing approvals, likewise",
    "indexed_status": "read from the search attributes, which a continuation inherits",
    "progress": "the declared state itself, carried whole",
    "pending_steps": "mirror rows not sent yet: a run flushes them before it continues",
    "pending_events": "mirror events not sent yet: flushed like pending_steps",
    "mirror_writes": "mirror writes in flight: a run waits for them before it continues",
    "stream": "the live stream: its log goes along in progress.stream_state at continue-as-new",
    "events": "a topic of that stream, opened again with it",
    "text": "a topic of that stream, opened again with it",
    "publish": "where the recorder sends each event live: that stream",
    "running_child": "set while a sub-agent's run is awaited: a run continues only between steps",
    "forwards": "pauses and resumes on their way to that child: sent within its step",
    "context": "the run's input, progress and recorder, which each component is built with",
    "recorder": "the run's record (its state is progress): built again from the input",
    "approvals": "a component: holds no state of its own beyond the references above",
    "steering": "a component, likewise",
    "sessions": "a component, likewise",
    "subagents": "a component: its running child and forwards are listed above",
    "controls": "a component, likewise",
    "checks": "a component, likewise",
    "tools": "a component, likewise",
    "_kept": "each intent's kept form and the component that applies it: built with them",
    "continue_as_new": "the workflow's own, which a session takes between turns",
    "tell_parent": "the sub-agents component's, which approvals call",
    "forward_control": "the sub-agents component's, which pause and resume call",
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


def _alike(run_id: str, spec: RunInput, progress: RunProgress) -> dict[str, Any]:
    """What every projection of the run says alike: whose run, its task, what it cost and
    why it failed."""
    return {
        "run_id": run_id,
        "tenant": spec.tenant,
        "user": spec.user,
        "requester": spec.requester,
        "task": spec.task,
        "tokens_in": progress.tokens_in,
        "tokens_out": progress.tokens_out,
        "cost_usd": progress.cost_usd,
        "error": progress.error,
    }


def _live(progress: RunProgress, priority: int) -> dict[str, Any]:
    """What the mirror's row and the `state` query say of a run in flight."""
    return {
        "priority": priority,
        "status": progress.status,
        "current_step_id": progress.current_step_id,
        "pause_reason": progress.pause_reason,
        "checkpoint": progress.checkpoint,
        "result": progress.answer,
    }


def snapshot(
    run_id: str, spec: RunInput, progress: RunProgress, now: datetime, priority: int
) -> RunSnapshot:
    """The mirror's run row."""
    return RunSnapshot(
        **_alike(run_id, spec, progress),
        **_live(progress, priority),
        version=progress.version,
        agent=spec.agent,
        profile_hash=spec.profile_hash,
        model=progress.model_used,
        duplicates_prevented=progress.duplicates_prevented,
        created_at=progress.started_at,
        updated_at=now,
        finished_at=progress.finished_at,
    )


def state_view(run_id: str, spec: RunInput, progress: RunProgress, priority: int) -> RunState:
    """What the `state` query answers."""
    return RunState(
        **_alike(run_id, spec, progress),
        **_live(progress, priority),
        steps=progress.steps,
        pending_approval=progress.pending_approval,
        pause_requested=progress.pause_requested,
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
        **_alike(run_id, spec, progress),
        agent=spec.agent,
        profile_hash=spec.profile_hash,
        outcome=progress.status,
        answer=progress.answer,
        steps=progress.steps,
        side_effects=progress.side_effects,
        approvals=progress.approvals,
        retries=[],
        duplicates_prevented=progress.duplicates_prevented,
        unpriced_models=list(progress.unpriced_models),
        verification=progress.verification,
        unresolved=progress.unresolved,
        started_at=progress.started_at,
        finished_at=progress.finished_at or now,
        forked_from=spec.fork,
        messages=progress.messages,
        parent_run_id=spec.parent_run_id,
        children=progress.children,
        trigger=spec.trigger,
        charged_to=spec.charged_to,
        turns=progress.turns,
        summaries=progress.summaries,
        left_in_mirror=progress.left_in_mirror,
    )
