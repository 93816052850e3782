"""Every kind of event a run records, and what a watcher's stream adds: each named once.

The workflow records events (`Recorder.event`), the mirror keeps them (`events.type`), and
the readers (the CLI's `watch`, AG-UI, chat, run metrics) match on them, all by these names;
the values are what the mirror and the stream have always held, so recorded runs read the
same.
"""

from __future__ import annotations

from enum import StrEnum

from agentledger.core.states import StepStatus


class EventType(StrEnum):
    # The run's life.
    RUN_STARTED = "run.started"
    RUN_QUEUED = "run.queued"
    RUN_ADMITTED = "run.admitted"
    RUN_PAUSED = "run.paused"
    RUN_RESUMED = "run.resumed"
    RUN_NEEDS_ADMIN = "run.needs_admin"
    RUN_FORKED = "run.forked"
    RUN_CONTINUED_AS_NEW = "run.continued_as_new"
    RUN_RECORD_TRIMMED = "run.record_trimmed"
    RUN_FINISHED = "run.finished"
    STATUS_CHANGED = "status.changed"
    PAUSE_REQUESTED = "pause.requested"
    RESUME_REQUESTED = "resume.requested"
    BUDGET_EXTENDED = "budget.extended"
    # A model call told to finish with what it has: its tenant's budget is nearly spent.
    BUDGET_WRAP_UP = "budget.wrap_up"
    # Each step's end, by its status (`step_ended`).
    STEP_COMPLETED = "step.completed"
    STEP_FAILED = "step.failed"
    STEP_PASSED = "step.passed"
    STEP_APPROVED = "step.approved"
    STEP_REJECTED = "step.rejected"
    STEP_EXPIRED = "step.expired"
    STEP_CANCELLED = "step.cancelled"
    STEP_ABANDONED = "step.abandoned"
    STEP_INTERRUPTED = "step.interrupted"
    STEP_UNKNOWN_OUTCOME = "step.unknown_outcome"
    # Approvals: asked, refused (a decision that did not fit), and each decision.
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_REFUSED = "approval.refused"
    APPROVAL_APPROVED = "approval.approved"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_EXPIRED = "approval.expired"
    # One approval of several a call needs: the pending approval as it now stands (its
    # votes; its arguments, if the approval edited them).
    APPROVAL_COUNTED = "approval.counted"
    # Models and tools.
    MODEL_FALLBACK = "model.fallback"
    MODEL_RATE_LIMITED = "model.rate_limited"
    MODEL_INTERRUPTED = "model.interrupted"
    MODEL_REPAIR_REQUESTED = "model.repair_requested"
    TOOL_REFUSED = "tool.refused"
    TOOL_DENIED = "tool.denied"
    TOOL_SUSPICIOUS = "tool.suspicious"
    TOOL_RECONCILED = "tool.reconciled"
    DUPLICATE_PREVENTED = "duplicate.prevented"
    FORK_OUTPUT_EDITED = "fork.output_edited"
    # Messages said to a run, and sessions.
    MESSAGE_RECEIVED = "message.received"
    # Refused by its session's double-texting policy (reject) while a turn was in flight.
    MESSAGE_REJECTED = "message.rejected"
    MESSAGE_TAKEN = "message.taken"
    MESSAGE_IGNORED = "message.ignored"
    SESSION_TURN_STARTED = "session.turn_started"
    SESSION_TURN_ANSWERED = "session.turn_answered"
    # A turn cut short by a message said while it was in flight (double-texting).
    SESSION_TURN_INTERRUPTED = "session.turn_interrupted"
    SESSION_TURN_ROLLED_BACK = "session.turn_rolled_back"
    SESSION_COMPACTED = "session.compacted"
    SESSION_END_REQUESTED = "session.end_requested"
    SESSION_END_IGNORED = "session.end_ignored"
    # Sub-agents.
    SUBAGENT_STARTED = "subagent.started"
    SUBAGENT_WAITING_FOR_APPROVAL = "subagent.waiting_for_approval"
    SUBAGENT_APPROVAL_SETTLED = "subagent.approval_settled"
    # What a watcher's stream adds to the recorded events (never in the mirror): a step's
    # retry, the model's text as it comes, the receipt, and a chat turn's own notes.
    STEP_RETRY = "step.retry"
    MODEL_TEXT = "model.text"
    MODEL_TEXT_RESET = "model.text_reset"
    RECEIPT = "receipt"
    CHAT_SAID = "chat.said"
    CHAT_NO_ANSWER = "chat.no_answer"
    CHAT_APPROVAL_PENDING = "chat.approval_pending"

    @classmethod
    def step_ended(cls, status: StepStatus) -> EventType:
        """The event a step's end records: `step.<its status>`."""
        return cls(f"step.{status.value}")

    @classmethod
    def decided(cls, decision: str) -> EventType:
        """The event an approval's decision records: `approval.<the decision>`."""
        return cls(f"approval.{decision}")
