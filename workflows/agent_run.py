"""AgentRun: one agent run as one Temporal workflow.

The loop is: decide (model call), act (tool calls, some behind a human approval), verify,
finish with a receipt. Every step has a deterministic id, and every change of state goes
through `_set_status`, which enforces the state machine in `agentrun.states`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities import MirrorActivities, ModelActivities, ToolActivities, VerifyActivities
    from agentrun import constants as names
    from agentrun.ledger import action_hash, idempotency_key
    from agentrun.models import (
        ApprovalRecord,
        ApproveInput,
        CheckpointInput,
        ControlInput,
        ControlResult,
        DecisionResult,
        JsonDict,
        MirrorBatch,
        ModelCallInput,
        ModelCallResult,
        PendingApproval,
        ProposedToolCall,
        Receipt,
        RejectInput,
        RunEvent,
        RunResult,
        RunSnapshot,
        RunSpec,
        RunState,
        SideEffectRecord,
        StepRecord,
        StepSummary,
        StepType,
        ToolCallInput,
        ToolCallResult,
        VerifyInput,
        VerifyResult,
    )
    from agentrun.states import RunStatus, check_transition, is_terminal

SYSTEM_PROMPT = (
    "You are a careful agent. Use the tools you are given when they help, one step at a "
    "time. When the task is done, reply with a final answer in Markdown that starts with "
    "a '## Summary' section."
)
# Mirror and receipt writes must outlast a Postgres outage: retry for as long as it takes.
MIRROR_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)


def cause(err: ActivityError) -> str:
    return err.cause.message if isinstance(err.cause, ApplicationError) else str(err.cause or err)


class RunEnded(Exception):
    """Raised inside the loop to end the run with a given status and reason."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@workflow.defn(name=names.WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.run_id = workflow.info().workflow_id
        self.status = RunStatus.QUEUED
        self.started_at = workflow.now()
        self.finished_at: datetime | None = None
        self.messages: list[JsonDict] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": spec.task},
        ]
        self.seq = 0
        self.version = 0
        self.current_step_id: str | None = None
        self.steps: list[StepSummary] = []
        self.model_used: str | None = spec.model.model
        self.pending_steps: list[StepRecord] = []
        self.pending_events: list[RunEvent] = []
        self.event_seq = 0
        self.pending_approval: PendingApproval | None = None
        self.decision: ApproveInput | RejectInput | None = None
        self.pause_requested = False
        self.checkpoint: JsonDict = {}
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.duplicates_prevented = 0
        self.side_effects: list[SideEffectRecord] = []
        self.approvals: list[ApprovalRecord] = []
        self.verification: VerifyResult | None = None
        self.unresolved: list[str] = []
        self.answer: str | None = None
        self.error: str | None = None

    # ------------------------------------------------------------------ the run

    @workflow.run
    async def run(self, spec: RunSpec) -> RunResult:
        self._event("run.started", data={"tenant": spec.tenant, "user": spec.user})
        cancelled = False
        try:
            await self._flush()
            await self._agent_loop()
        except RunEnded as end:
            self._finish(end.status, error=end.reason)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                assert isinstance(err, ActivityError)
                self._finish(RunStatus.FAILED, error=f"{err.activity_type} failed: {cause(err)}")
            else:
                self._finish(RunStatus.CANCELLED, error="cancelled on request")
                cancelled = True
        await self._record_receipt()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if cancelled:
            # The receipt is written; now Temporal shows the run as cancelled too.
            raise asyncio.CancelledError("cancelled on request")
        return RunResult(
            run_id=self.run_id, status=self.status, answer=self.answer, error=self.error
        )

    async def _agent_loop(self) -> None:
        verify_rounds = 0
        for _ in range(self.spec.max_steps):
            await self._step_boundary()
            reply = await self._model_step()
            self._check_budget()
            if reply.tool_calls:
                for call in reply.tool_calls:
                    await self._step_boundary()
                    await self._tool_step(call)
                continue
            answer = reply.content or ""
            verdict = await self._verify_step(answer)
            if verdict.passed:
                self._finish(RunStatus.COMPLETED, answer=answer)
                return
            verify_rounds += 1
            if verify_rounds >= self.spec.verify.max_rounds:
                raise RunEnded(
                    RunStatus.FAILED, "verification failed: " + "; ".join(verdict.failures)
                )
            self.messages.append(
                {
                    "role": "user",
                    "content": "Your answer failed verification: "
                    + "; ".join(verdict.failures)
                    + ". Reply again with a corrected final answer.",
                }
            )
        raise RunEnded(RunStatus.FAILED, f"step limit reached ({self.spec.max_steps} model calls)")

    async def _step_boundary(self) -> None:
        """Where a pause takes effect: between steps, never inside one."""
        if not self.pause_requested:
            return
        self._set_status(RunStatus.PAUSED)
        self._event("run.paused")
        await self._flush()
        await workflow.wait_condition(lambda: not self.pause_requested)
        self._event("run.resumed")

    # ------------------------------------------------------------------ steps

    async def _model_step(self) -> ModelCallResult:
        step_id = self._new_step("model_call", self.model_used or "model")
        self._set_status(RunStatus.PLANNING, step_id)
        await self._flush()
        started = workflow.now()
        timeouts = self.spec.timeouts
        reply = await workflow.execute_activity_method(
            ModelActivities.complete,
            ModelCallInput(
                run_id=self.run_id,
                step_id=step_id,
                seq=self.seq,
                model=self.spec.model.model,
                messages=self.messages,
                allowed_tools=self.spec.allowed_tools,
                temperature=self.spec.model.temperature,
                max_tokens=self.spec.model.max_tokens,
                heartbeat_seconds=timeouts.heartbeat_seconds,
            ),
            start_to_close_timeout=timedelta(seconds=timeouts.model_seconds),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_seconds),
            retry_policy=self._retry_policy(),
        )
        self.model_used = reply.model
        self.tokens_in += reply.usage.input_tokens
        self.tokens_out += reply.usage.output_tokens
        self.cost_usd = round(self.cost_usd + reply.cost_usd, 6)
        self.messages.append(reply.assistant_message)
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="model_call",
                name=reply.model,
                status="completed",
                attempt=reply.attempt,
                output={"content": reply.content, "tool_calls": [c.tool for c in reply.tool_calls]},
                tokens_in=reply.usage.input_tokens,
                tokens_out=reply.usage.output_tokens,
                cost_usd=reply.cost_usd,
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        return reply

    async def _tool_step(self, call: ProposedToolCall) -> None:
        if call.error is not None:
            # The model hears why and may revise; the tool never runs with bad arguments.
            self._event("tool.refused", data={"tool": call.tool, "error": call.error})
            self._tool_message(call.call_id, {"error": call.error})
            return
        arguments = call.arguments or {}
        if self.spec.approval.needs_approval(call.tool, call.risk):
            approved = await self._approval_step(call.tool, arguments)
            if approved is None:
                self._tool_message(call.call_id, {"error": "the approver rejected this call"})
                return
            arguments = approved
        step_id = self._new_step("tool_call", call.tool)
        self._set_status(RunStatus.WAITING_FOR_TOOL, step_id)
        await self._flush()
        key = idempotency_key(self.run_id, step_id, call.tool, arguments)
        started = workflow.now()
        timeouts = self.spec.timeouts
        try:
            result = await workflow.execute_activity_method(
                ToolActivities.invoke,
                ToolCallInput(
                    run_id=self.run_id,
                    step_id=step_id,
                    seq=self.seq,
                    tool=call.tool,
                    arguments=arguments,
                    idempotency_key=key,
                    checkpoint=self.checkpoint,
                    heartbeat_seconds=timeouts.heartbeat_seconds,
                ),
                start_to_close_timeout=timedelta(seconds=timeouts.tool_seconds),
                heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_seconds),
                retry_policy=self._retry_policy(),
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            result = ToolCallResult(ok=False, error=f"tool failed after retries: {cause(err)}")
            self.unresolved.append(f"{step_id}: {call.tool} failed: {cause(err)}")
        if result.duplicate_prevented:
            self.duplicates_prevented += 1
            self._event("duplicate.prevented", step_id, {"idempotency_key": key})
        if call.side_effect:
            self.side_effects.append(
                SideEffectRecord(
                    step_id=step_id,
                    tool=call.tool,
                    idempotency_key=key,
                    arguments=arguments,
                    ok=result.ok,
                    duplicate_prevented=result.duplicate_prevented,
                    output=result.output,
                )
            )
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="tool_call",
                name=call.tool,
                status="completed" if result.ok else "failed",
                input=arguments,
                output=result.output,
                error=result.error,
                attempt=result.attempt,
                idempotency_key=key if call.side_effect else None,
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        if result.checkpoint_patch:
            await self._checkpoint_step(result.checkpoint_patch)
        self._tool_message(call.call_id, result.output if result.ok else {"error": result.error})

    async def _approval_step(self, tool: str, arguments: JsonDict) -> JsonDict | None:
        """Wait, holding no worker, for a human; returns the arguments to run, or None."""
        policy = self.spec.approval
        step_id = self._new_step("approval", tool)
        now = workflow.now()
        pending = PendingApproval(
            approval_id=step_id,
            step_id=step_id,
            tool=tool,
            arguments=arguments,
            action_hash=action_hash(tool, arguments),
            required_role=policy.role_for(tool),
            approvers=policy.approvers,
            tenant=self.spec.tenant,
            requested_at=now,
            expires_at=now + timedelta(seconds=policy.timeout_seconds),
        )
        self.pending_approval, self.decision = pending, None
        self._set_status(RunStatus.WAITING_FOR_APPROVAL, step_id)
        self._event("approval.requested", step_id, pending.model_dump(mode="json"))
        self.pending_steps.append(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="approval",
                name=tool,
                status="waiting",
                input={"arguments": arguments, "required_role": pending.required_role},
                started_at=now,
                final=False,
            )
        )
        await self._flush()
        try:
            await workflow.wait_condition(
                lambda: self.decision is not None,
                timeout=timedelta(seconds=policy.timeout_seconds),
            )
        except TimeoutError:
            pass
        decision, self.decision, self.pending_approval = self.decision, None, None
        record = self._approval_record(pending, decision)
        self.approvals.append(record)
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="approval",
                name=tool,
                status=record.decision,
                input={"arguments": arguments},
                output=record.model_dump(mode="json"),
                started_at=now,
                finished_at=record.decided_at,
            )
        )
        self._event(f"approval.{record.decision}", step_id, {"by": record.by})
        if record.decision == "approved":
            return record.final_arguments
        reason = record.reason or record.decision
        if record.decision == "expired":
            raise RunEnded(RunStatus.FAILED, f"approval for {tool} expired unanswered")
        if policy.on_reject == "cancel":
            raise RunEnded(RunStatus.CANCELLED, f"approval for {tool} rejected: {reason}")
        self._set_status(RunStatus.PLANNING, step_id)
        return None

    def _approval_record(
        self, pending: PendingApproval, decision: ApproveInput | RejectInput | None
    ) -> ApprovalRecord:
        expired = ApprovalRecord(
            approval_id=pending.approval_id,
            tool=pending.tool,
            proposed_arguments=pending.arguments,
            decision="expired",
            reason="no decision in time",
            requested_at=pending.requested_at,
            decided_at=workflow.now(),
        )
        if isinstance(decision, ApproveInput):
            return expired.model_copy(
                update={
                    "decision": "approved",
                    "by": decision.by,
                    "role": decision.role,
                    "edit": decision.edit,
                    "reason": None,
                    "final_arguments": {**pending.arguments, **(decision.edit or {})},
                }
            )
        if isinstance(decision, RejectInput):
            return expired.model_copy(
                update={
                    "decision": "rejected",
                    "by": decision.by,
                    "role": decision.role,
                    "reason": decision.reason,
                }
            )
        return expired

    async def _verify_step(self, answer: str) -> VerifyResult:
        step_id = self._new_step("verify", "checks")
        self._set_status(RunStatus.VERIFYING, step_id)
        await self._flush()
        started = workflow.now()
        verdict = await workflow.execute_activity_method(
            VerifyActivities.check,
            VerifyInput(run_id=self.run_id, step_id=step_id, answer=answer, spec=self.spec.verify),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=self._retry_policy(),
        )
        self.verification = verdict
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="verify",
                name="checks",
                status="passed" if verdict.passed else "failed",
                output=verdict.model_dump(mode="json"),
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        return verdict

    async def _checkpoint_step(self, patch: JsonDict) -> None:
        self.checkpoint = {**self.checkpoint, **patch}
        step_id = self._new_step("checkpoint", "merge")
        await workflow.execute_activity_method(
            MirrorActivities.save_checkpoint,
            CheckpointInput(run_id=self.run_id, step_id=step_id, checkpoint=self.checkpoint),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=MIRROR_RETRY,
        )
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.seq,
                type="checkpoint",
                name="merge",
                status="completed",
                input=patch,
                finished_at=workflow.now(),
            )
        )

    # ------------------------------------------------------------------ state and mirror

    def _set_status(self, new: RunStatus, step_id: str | None = None) -> None:
        if new != self.status:
            old = self.status
            self.status = check_transition(old, new)
            self._event("status.changed", step_id, {"from": old.value, "to": new.value})
        if step_id is not None:
            self.current_step_id = step_id

    def _finish(
        self, status: RunStatus, *, answer: str | None = None, error: str | None = None
    ) -> None:
        self._set_status(status)
        self.answer, self.error = answer, error
        self.finished_at = workflow.now()
        self.current_step_id = None
        pending = self.pending_approval
        if pending is not None:
            self.unresolved.append(f"approval {pending.approval_id} for {pending.tool} undecided")
            self._complete_step(
                StepRecord(
                    step_id=pending.step_id,
                    seq=self._seq_of(pending.step_id),
                    type="approval",
                    name=pending.tool,
                    status="abandoned",
                    input={"arguments": pending.arguments},
                    started_at=pending.requested_at,
                    finished_at=self.finished_at,
                )
            )
            self.pending_approval = None
        self._event("run.finished", data={"status": status.value, "error": error})

    def _new_step(self, kind: StepType, name: str) -> str:
        self.seq += 1
        step_id = f"{self.seq:04d}-{kind}"
        self.steps.append(
            StepSummary(step_id=step_id, seq=self.seq, type=kind, name=name, status="running")
        )
        return step_id

    def _seq_of(self, step_id: str) -> int:
        return next(s.seq for s in self.steps if s.step_id == step_id)

    def _complete_step(self, record: StepRecord) -> None:
        for i, summary in enumerate(self.steps):
            if summary.step_id == record.step_id:
                self.steps[i] = summary.model_copy(
                    update={"name": record.name, "status": record.status, "attempt": record.attempt}
                )
        self.pending_steps.append(record)
        self._event(f"step.{record.status}", record.step_id, {"type": record.type})

    def _event(self, type: str, step_id: str | None = None, data: JsonDict | None = None) -> None:
        self.event_seq += 1
        self.pending_events.append(
            RunEvent(
                seq=self.event_seq, type=type, step_id=step_id, data=data or {}, at=workflow.now()
            )
        )

    def _tool_message(self, call_id: str, content: object) -> None:
        self.messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content, default=str)}
        )

    def _check_budget(self) -> None:
        budget = self.spec.budget
        if budget.max_tokens and self.tokens_in + self.tokens_out > budget.max_tokens:
            raise RunEnded(
                RunStatus.FAILED,
                f"token budget exceeded: {self.tokens_in + self.tokens_out} > {budget.max_tokens}",
            )
        if budget.max_cost_usd and self.cost_usd > budget.max_cost_usd:
            raise RunEnded(
                RunStatus.FAILED,
                f"cost budget exceeded: ${self.cost_usd:.6f} > ${budget.max_cost_usd}",
            )

    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            initial_interval=timedelta(seconds=self.spec.timeouts.initial_retry_seconds),
            maximum_attempts=self.spec.timeouts.max_attempts,
        )

    def _snapshot(self) -> RunSnapshot:
        self.version += 1
        return RunSnapshot(
            run_id=self.run_id,
            version=self.version,
            tenant=self.spec.tenant,
            user=self.spec.user,
            task=self.spec.task,
            status=self.status,
            current_step_id=self.current_step_id,
            model=self.model_used,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=self.cost_usd,
            duplicates_prevented=self.duplicates_prevented,
            checkpoint=self.checkpoint,
            result=self.answer,
            error=self.error,
            created_at=self.started_at,
            updated_at=workflow.now(),
            finished_at=self.finished_at,
        )

    async def _flush(self) -> None:
        """Write what changed since the last flush to the mirror, as one idempotent batch."""
        batch = MirrorBatch(
            run=self._snapshot(), steps=self.pending_steps, events=self.pending_events
        )
        self.pending_steps, self.pending_events = [], []
        await workflow.execute_activity_method(
            MirrorActivities.sync,
            batch,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=MIRROR_RETRY,
        )

    async def _record_receipt(self) -> None:
        await self._flush()
        receipt = Receipt(
            run_id=self.run_id,
            task=self.spec.task,
            tenant=self.spec.tenant,
            user=self.spec.user,
            outcome=self.status,
            answer=self.answer,
            error=self.error,
            steps=self.steps,
            side_effects=self.side_effects,
            approvals=self.approvals,
            retries=[],
            duplicates_prevented=self.duplicates_prevented,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=self.cost_usd,
            verification=self.verification,
            unresolved=self.unresolved,
            started_at=self.started_at,
            finished_at=self.finished_at or workflow.now(),
        )
        await workflow.execute_activity_method(
            MirrorActivities.record_receipt,
            receipt,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=MIRROR_RETRY,
        )

    # ------------------------------------------------------------------ messages

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
            checkpoint=self.checkpoint,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=self.cost_usd,
            result=self.answer,
            error=self.error,
        )

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
