"""What people and other workflows may ask a run or tell it: queries, updates, signals.

Mixed into AgentRunWorkflow, whose state these handlers read. Validators refuse, with a
reason a person can act on, without changing anything; signals cannot be refused, so one
that does not fit is recorded as an event and ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentrun import constants as names
    from agentrun.admission_models import AdmitInput
    from agentrun.models import (
        ApprovalRecord,
        ApproveInput,
        ControlInput,
        ControlResult,
        DecisionResult,
        JsonDict,
        PendingApproval,
        RejectInput,
        RunSpec,
        RunState,
        StepSummary,
    )
    from agentrun.states import RunStatus, is_terminal


class RunMessages:
    # The run state these handlers read, owned by AgentRunWorkflow.
    run_id: str
    spec: RunSpec
    status: RunStatus
    current_step_id: str | None
    steps: list[StepSummary]
    pending_approval: PendingApproval | None
    decision: ApproveInput | RejectInput | None
    approvals: list[ApprovalRecord]
    pause_requested: bool
    pause_reason: str | None
    checkpoint: JsonDict
    tokens_in: int
    tokens_out: int
    cost_usd: float
    answer: str | None
    error: str | None
    admitted: bool
    _event: Callable[..., Any]
    _priority: Callable[[], int]

    @workflow.query(name=names.QUERY_STATE)
    def state(self) -> RunState:
        return RunState(
            run_id=self.run_id,
            status=self.status,
            tenant=self.spec.tenant,
            user=self.spec.user,
            task=self.spec.task,
            current_step_id=self.current_step_id,
            steps=self.steps,
            pending_approval=self.pending_approval,
            pause_requested=self.pause_requested,
            pause_reason=self.pause_reason,
            checkpoint=self.checkpoint,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=self.cost_usd,
            result=self.answer,
            error=self.error,
            priority=self._priority(),
            admission=self.spec.admission,
        )

    @workflow.signal(name=names.SIGNAL_RUN_ADMIT)
    def admit_signal(self, input: AdmitInput) -> None:
        """The tenant's admission queue gives this run a slot."""
        self.admitted = True

    @workflow.query(name=names.QUERY_PENDING_APPROVAL)
    def get_pending_approval(self) -> PendingApproval | None:
        return self.pending_approval

    def _check_decision(self, action: str, by: str, role: str, tenant: str | None) -> None:
        """Refuse, with a reason a person can act on, any decision that does not fit."""
        pending = self.pending_approval
        if is_terminal(self.status):
            raise ApplicationError(f"run {self.run_id} already ended as {self.status.value}")
        if pending is None or self.decision is not None:
            raise ApplicationError(
                f"run {self.run_id} is not waiting for an approval (status {self.status.value})"
            )
        if action != pending.action_hash:
            raise ApplicationError(
                f"stale approval: the pending action is {pending.action_hash} "
                f"({pending.tool}), not {action}; run `status` and decide again"
            )
        if tenant is not None and tenant != pending.tenant:
            raise ApplicationError(f"run {self.run_id} belongs to another tenant")
        if role != pending.required_role:
            raise ApplicationError(
                f"{by} has role {role!r}, but {pending.tool} needs role {pending.required_role!r}"
            )
        if pending.approvers and by not in pending.approvers:
            raise ApplicationError(f"{by} is not among the approvers for this run")
        if workflow.now() >= pending.expires_at:
            raise ApplicationError(f"the approval expired at {pending.expires_at.isoformat()}")

    async def _decide_by_update(self, input: ApproveInput | RejectInput) -> DecisionResult:
        # Two updates can both pass validation in one activation; only the first decides.
        self._check_decision(input.action_hash, input.by, input.role, input.tenant)
        assert self.pending_approval is not None
        approval_id = self.pending_approval.approval_id
        self.decision = input
        await workflow.wait_condition(
            lambda: (
                self.pending_approval is None or self.pending_approval.approval_id != approval_id
            )
        )
        last = self.approvals[-1] if self.approvals else None
        decided = last.decision if last and last.approval_id == approval_id else "applied"
        return DecisionResult(approval_id=approval_id, decision=decided, status=self.status)

    @workflow.update(name=names.UPDATE_APPROVE)
    async def approve(self, input: ApproveInput) -> DecisionResult:
        return await self._decide_by_update(input)

    @approve.validator
    def _validate_approve(self, input: ApproveInput) -> None:
        self._check_decision(input.action_hash, input.by, input.role, input.tenant)

    @workflow.update(name=names.UPDATE_REJECT)
    async def reject(self, input: RejectInput) -> DecisionResult:
        return await self._decide_by_update(input)

    @reject.validator
    def _validate_reject(self, input: RejectInput) -> None:
        self._check_decision(input.action_hash, input.by, input.role, input.tenant)

    @workflow.signal(name=names.SIGNAL_APPROVE)
    def approve_signal(self, input: ApproveInput) -> None:
        self._decide_by_signal(input)

    @workflow.signal(name=names.SIGNAL_REJECT)
    def reject_signal(self, input: RejectInput) -> None:
        self._decide_by_signal(input)

    def _decide_by_signal(self, input: ApproveInput | RejectInput) -> None:
        """A signal cannot be refused, so one that does not fit is recorded and ignored."""
        try:
            self._check_decision(input.action_hash, input.by, input.role, input.tenant)
        except ApplicationError as err:
            self._event("approval.refused", data={"by": input.by, "reason": err.message})
            return
        self.decision = input

    @workflow.update(name=names.UPDATE_PAUSE)
    def pause(self, input: ControlInput) -> ControlResult:
        self.pause_requested = True
        self._event("pause.requested", data={"by": input.by})
        return ControlResult(
            status=self.status, paused=True, message="the run pauses at its next step boundary"
        )

    @pause.validator
    def _validate_pause(self, input: ControlInput) -> None:
        if is_terminal(self.status):
            raise ApplicationError(f"run {self.run_id} already ended as {self.status.value}")

    @workflow.update(name=names.UPDATE_RESUME)
    def resume(self, input: ControlInput) -> ControlResult:
        self.pause_requested = False
        self._event("resume.requested", data={"by": input.by})
        return ControlResult(status=self.status, paused=False, message="the run continues")

    @resume.validator
    def _validate_resume(self, input: ControlInput) -> None:
        if is_terminal(self.status):
            raise ApplicationError(f"run {self.run_id} already ended as {self.status.value}")
        if not self.pause_requested:
            raise ApplicationError(f"run {self.run_id} is not paused (status {self.status.value})")

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause_signal(self, input: ControlInput) -> None:
        if not is_terminal(self.status):
            self.pause_requested = True

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume_signal(self, input: ControlInput) -> None:
        self.pause_requested = False
