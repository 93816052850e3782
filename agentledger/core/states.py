"""The run state machine (every legal transition is written here and nowhere else), and the
statuses a run's steps take."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    WAITING_FOR_TOOL = "waiting_for_tool"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    VERIFYING = "verifying"
    PAUSED = "paused"
    # A session (spec `session`) that has answered and waits for the next message.
    WAITING_FOR_MESSAGE = "waiting_for_message"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Its tenant's (or its credential's) enforcing budget was spent: it ended at a model
    # call, never inside a tool call, with a receipt of what it did (agentledger.core.budgets).
    BUDGET_EXHAUSTED = "budget_exhausted"


S = RunStatus
TERMINAL: frozenset[RunStatus] = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.BUDGET_EXHAUSTED})
_ENDINGS = {S.FAILED, S.CANCELLED, S.PAUSED, S.BUDGET_EXHAUSTED}

TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    S.QUEUED: frozenset({S.PLANNING, *_ENDINGS}),
    S.PLANNING: frozenset({S.WAITING_FOR_TOOL, S.WAITING_FOR_APPROVAL, S.VERIFYING, *_ENDINGS}),
    S.WAITING_FOR_TOOL: frozenset(
        {S.PLANNING, S.WAITING_FOR_TOOL, S.WAITING_FOR_APPROVAL, S.VERIFYING, *_ENDINGS}
    ),
    # A decision sends the approved call to the tool, back to the model, or on to verify.
    S.WAITING_FOR_APPROVAL: frozenset(
        {S.WAITING_FOR_TOOL, S.PLANNING, S.VERIFYING, S.PAUSED, S.FAILED, S.CANCELLED}
    ),
    S.VERIFYING: frozenset({S.COMPLETED, S.PLANNING, S.WAITING_FOR_MESSAGE, *_ENDINGS}),
    # A session's next message starts a turn; an idle timeout or `end` completes it.
    S.WAITING_FOR_MESSAGE: frozenset({S.PLANNING, S.COMPLETED, *_ENDINGS}),
    # Resume returns to whatever the next step needs; an idle session paused returns to its
    # wait (or starts the turn said meanwhile), and one ended while paused completes.
    S.PAUSED: frozenset(
        {
            S.PLANNING,
            S.WAITING_FOR_TOOL,
            S.WAITING_FOR_APPROVAL,
            S.VERIFYING,
            S.WAITING_FOR_MESSAGE,
            S.COMPLETED,
            S.FAILED,
            S.CANCELLED,
        }
    ),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.BUDGET_EXHAUSTED: frozenset(),
}


# The status a step of each kind puts the run in while it runs (a checkpoint leaves it as it
# is): the steps move the run through the transitions above, never a status set by hand.
STEP_STATUS: dict[str, RunStatus] = {
    "model_call": S.PLANNING,
    "tool_call": S.WAITING_FOR_TOOL,
    "approval": S.WAITING_FOR_APPROVAL,
    "verify": S.VERIFYING,
}


class StepStatus(StrEnum):
    """Where one step of a run stands: in flight, or how it ended. A step's record, its
    `step.<status>` event and the mirror's `steps.status` say the same."""

    RUNNING = "running"
    # An approval's step while the person decides (its record is replaced by the decision).
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    # A verification step whose checks held.
    PASSED = "passed"
    # An approval's step, by its decision.
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    # A tool call the run was cancelled during; one in flight when the run ended otherwise.
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    # A model call cancelled for a message the run replans with.
    INTERRUPTED = "interrupted"
    # A side effect whose outcome nobody can tell (a person decides whether it happened).
    UNKNOWN_OUTCOME = "unknown_outcome"
    # An attempt's own report in the mirror, written by its activity before the run records
    # the step's end (a fork or a crash reads it there); no event says it.
    ATTEMPT_SUCCEEDED = "attempt_succeeded"
    ATTEMPT_FAILED = "attempt_failed"


class IllegalTransitionError(ValueError):
    """A transition the state machine does not allow: a bug, never a shortcut to take."""


def check_transition(current: RunStatus, new: RunStatus) -> RunStatus:
    if new not in TRANSITIONS[current]:
        raise IllegalTransitionError(f"illegal run transition {current.value} -> {new.value}")
    return new


def is_terminal(status: RunStatus) -> bool:
    return status in TERMINAL
