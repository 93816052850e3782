"""AgentRun: one agent run as one Temporal workflow.

The loop is: decide (model call), act (tool calls, some behind a human approval), verify,
finish with a receipt. Every step has a deterministic id, and every change of state goes
through `_set_status`, which enforces the state machine in `agentrun.states`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from activities import MirrorActivities, ModelActivities, ToolActivities, VerifyActivities
    from agentrun import constants as names
    from agentrun import fairness, payload_limits, search_attributes
    from agentrun.admission_models import ReleaseInput
    from agentrun.conversation import STEP_OUTPUT_REF
    from agentrun.errors import PAYLOAD_TOO_LARGE, PERMISSION_DENIED
    from agentrun.ledger import action_hash, idempotency_key
    from agentrun.models import (
        ApprovalKind,
        ApprovalRecord,
        ApproveInput,
        CheckpointInput,
        JsonDict,
        MirrorBatch,
        ModelCallInput,
        ModelCallResult,
        PendingApproval,
        ProposedToolCall,
        Receipt,
        RejectInput,
        RunCarry,
        RunEvent,
        RunResult,
        RunSnapshot,
        RunSpec,
        SideEffectRecord,
        StepRecord,
        StepSummary,
        StepType,
        ToolCallInput,
        ToolCallResult,
        VerifyInput,
        VerifyResult,
    )
    from agentrun.states import RunStatus, check_transition
    from workflows import policies
    from workflows.run_messages import RunMessages

SYSTEM_PROMPT = (
    "You are a careful agent. Use the tools you are given when they help, one step at a "
    "time. When the task is done, reply with a final answer in Markdown that starts with "
    "a '## Summary' section."
)
# Patch ids: each marks a change to what the workflow does, so histories recorded before it
# replay along the old path. Remove the old path (deprecate_patch) once no such run is open.
MIRROR_SYNC_LOCAL = "mirror-sync-local-activity"
# A local activity writes before Temporal has accepted the workflow task it runs in; if the
# task is then lost (a server restart, a dropped speculative update task), the mirror shows
# what never happened. The chaos suite caught it. Mirror writes are now activities, which
# Temporal dispatches only after it has committed the task that scheduled them, and the run
# does not wait for them: it goes on, and waits for them all before its receipt and before
# it continues as new. Fences keep writes that land out of order from going backwards.
MIRROR_SYNC_AFTER_COMMIT = "mirror-sync-after-commit"
# Model calls go to a task queue of their own, where the server limits each tenant's rate
# (agentrun.fairness). Runs that made model calls on the run queue replay the way they did.
MODEL_CALL_QUEUE = "model-call-queue"
# Mirror and receipt writes must outlast a Postgres outage: retry for as long as it takes,
# and often enough that the mirror catches up within seconds of the database returning
# (fairness.MIRROR_RETRY). A mirror write goes ahead of model and tool calls waiting on the
# same task queue (fairness.MIRROR_PRIORITY: 1, the highest of Temporal's priority keys; a
# run's own is 3 unless it was started with another), so under load the mirror keeps up.
MIRROR_PRIORITY = fairness.MIRROR_PRIORITY
MIRROR_RETRY = fairness.MIRROR_RETRY
# A mirror write is one short transaction; a worker that died during one is noticed soon.
MIRROR_WRITE_TIMEOUT = timedelta(seconds=10)


class RunEnded(Exception):
    """Raised inside the loop to end the run with a given status and reason."""

    def __init__(self, status: RunStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@workflow.defn(name=names.WORKFLOW_NAME)
class AgentRunWorkflow(RunMessages):
    @workflow.init
    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.run_id = workflow.info().workflow_id
        self.status = RunStatus.QUEUED
        self.started_at = workflow.now()
        self.finished_at: datetime | None = None
        # Messages the conversation store does not hold yet; it holds `stored_messages`.
        self.pending_messages: list[JsonDict] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": spec.task},
        ]
        self.generation = 0
        self.model_calls = 0
        self.verify_rounds = 0
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
        self.mirror_writes: list[workflow.ActivityHandle[None]] = []
        self.pause_requested = False
        self.pause_reason: str | None = None
        self.budget = spec.budget
        self.malformed_streak = 0
        self.argument_streak = 0
        self.model_choice = 0
        self.stored_messages = 0  # how much of the conversation the store already holds
        # Only runs started with the search attributes keep them current (see the module).
        self.indexed = search_attributes.STATUS in workflow.info().typed_search_attributes
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
        # A run started by its tenant's admission queue waits for a slot (only runs whose
        # input names a queue take this path, so older histories replay unchanged). A
        # continuation was admitted long ago.
        self.admitted = spec.admission is None or spec.carry is not None
        if spec.carry is not None:  # a continuation: pick up exactly where the last left off
            carry = spec.carry.model_copy(deep=True)
            for name in RunCarry.model_fields:
                setattr(self, name, getattr(carry, name))

    def _carry(self) -> RunCarry:
        fields = {name: getattr(self, name) for name in RunCarry.model_fields}
        return RunCarry(**{**fields, "generation": self.generation + 1})

    async def _continue_as_new_if_long(self) -> None:
        """Past the history limit, start afresh with the carried state, between steps."""
        info = workflow.info()
        if not (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.spec.history_events_limit
        ):
            return
        self._event("run.continued_as_new", data={"generation": self.generation + 1})
        await self._flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._mirror_written()
        workflow.continue_as_new(self.spec.model_copy(update={"carry": self._carry()}))

    # ------------------------------------------------------------------ the run

    @workflow.run
    async def run(self, spec: RunSpec) -> RunResult:
        if spec.carry is None:
            self._event("run.started", data={"tenant": spec.tenant, "user": spec.user})
        cancelled = False
        try:
            await self._flush()
            await self._wait_for_slot()
            await self._agent_loop()
        except RunEnded as end:
            self._finish(end.status, error=end.reason)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                assert isinstance(err, ActivityError)
                self._finish(
                    RunStatus.FAILED, error=f"{err.activity_type} failed: {policies.cause(err)}"
                )
            else:
                self._finish(RunStatus.CANCELLED, error="cancelled on request")
                cancelled = True
        except ApplicationError as err:
            # An input Temporal would refuse (agentrun.payload_limits): end the run with the
            # reason rather than fail the workflow task, which Temporal retries for ever.
            if not payload_limits.is_too_large(err):
                raise
            self._fail_unsent_step(err.message)
            self._finish(RunStatus.FAILED, error=err.message)
        await self._record_receipt()
        await self._release_slot()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if cancelled:
            # The receipt is written; now Temporal shows the run as cancelled too.
            raise asyncio.CancelledError("cancelled on request")
        return RunResult(
            run_id=self.run_id, status=self.status, answer=self.answer, error=self.error
        )

    async def _wait_for_slot(self) -> None:
        """Stay `queued` until the tenant's admission queue says a slot is ours."""
        if self.admitted:
            return
        self._event("run.queued", data={"admission": self.spec.admission})
        await self._flush()
        await workflow.wait_condition(lambda: self.admitted)
        self._event("run.admitted")

    async def _release_slot(self) -> None:
        """Tell the admission queue the slot (or the place in line) is free."""
        if self.spec.admission is None:
            return
        try:
            await workflow.get_external_workflow_handle(self.spec.admission).signal(
                names.SIGNAL_ADMISSION_RELEASE, ReleaseInput(run_id=self.run_id)
            )
        except FailureError:
            pass  # the queue was terminated: nobody holds the slot any more

    async def _agent_loop(self) -> None:
        while self.model_calls < self.spec.max_steps:
            await self._continue_as_new_if_long()
            await self._step_boundary()
            reply = await self._model_step()
            self.model_calls += 1
            await self._enforce_budget()
            if self._needs_repair(reply):
                continue
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
            self.verify_rounds += 1
            if (
                self.spec.verify.on_failure == "fail"
                or self.verify_rounds >= self.spec.verify.max_rounds
            ):
                raise RunEnded(
                    RunStatus.FAILED, "verification failed: " + "; ".join(verdict.failures)
                )
            self.pending_messages.append(
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
        self._event("run.paused", data={"reason": self.pause_reason})
        await self._flush()
        await workflow.wait_condition(lambda: not self.pause_requested)
        self.pause_reason = None
        self._event("run.resumed")

    async def _pause_for_admin(self, reason: str) -> None:
        """A failure no retry can fix (a refused permission): wait for a person to resume."""
        self.pause_requested, self.pause_reason = True, reason
        self._event("run.needs_admin", data={"reason": reason})
        await self._step_boundary()

    # ------------------------------------------------------------------ model steps

    async def _model_step(self) -> ModelCallResult:
        """One decision. When the primary keeps failing, the run moves to the fallback model
        and stays there."""
        failures = self.spec.failures
        models = [self.spec.model.model]
        if failures.fallback_model:
            models.append(failures.fallback_model)
        while True:
            index = min(self.model_choice, len(models) - 1)
            last = index == len(models) - 1
            attempts = (
                self.spec.timeouts.max_attempts if last else failures.model_attempts_before_fallback
            )
            try:
                return await self._call_model(models[index], attempts)
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                kind = policies.error_kind(err)
                if kind == PERMISSION_DENIED and failures.on_permission_denied == "pause":
                    await self._pause_for_admin(f"model provider refused: {policies.cause(err)}")
                    continue
                if last or kind in policies.FINAL_ERRORS:
                    raise
                self._event(
                    "model.fallback",
                    data={"from": models[index], "to": models[index + 1], "reason": kind},
                )
                self.model_choice = index + 1

    async def _call_model(self, model: str | None, attempts: int) -> ModelCallResult:
        step_id = self._new_step("model_call", model or self.model_used or "model")
        self._set_status(RunStatus.PLANNING, step_id)
        await self._flush()
        started = workflow.now()
        timeouts = self.spec.timeouts
        try:
            reply = await workflow.execute_activity_method(
                ModelActivities.complete,
                ModelCallInput(
                    run_id=self.run_id,
                    step_id=step_id,
                    seq=self.seq,
                    model=model,
                    new_messages=self.pending_messages,
                    first_index=self.stored_messages,
                    allowed_tools=self.spec.allowed_tools,
                    temperature=self.spec.model.temperature,
                    max_tokens=self.spec.model.max_tokens,
                    heartbeat_seconds=timeouts.heartbeat_seconds,
                    timeout_seconds=timeouts.model_seconds,
                ),
                task_queue=fairness.model_task_queue(workflow.info().task_queue)
                if workflow.patched(MODEL_CALL_QUEUE)
                else None,
                start_to_close_timeout=timedelta(seconds=timeouts.model_seconds),
                heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_seconds),
                retry_policy=policies.retry_policy(self.spec, attempts),
            )
        except ActivityError as err:
            if not is_cancelled_exception(err):
                self._complete_step(
                    StepRecord(
                        step_id=step_id,
                        seq=self._seq_of(step_id),
                        type="model_call",
                        name=model or "model",
                        status="failed",
                        error=f"{policies.error_kind(err)}: {policies.cause(err)}",
                        attempt=attempts,
                        started_at=started,
                        finished_at=workflow.now(),
                    )
                )
            raise
        self.stored_messages += len(self.pending_messages)
        self.pending_messages = []
        self.model_used = reply.model
        self.tokens_in += reply.usage.input_tokens
        self.tokens_out += reply.usage.output_tokens
        self.cost_usd = round(self.cost_usd + reply.cost_usd, 6)
        self.pending_messages.append(reply.assistant_message)
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self._seq_of(step_id),
                type="model_call",
                name=reply.model,
                status="completed",
                attempt=reply.attempt,
                output={
                    "content": reply.content,
                    "tool_calls": [c.tool for c in reply.tool_calls],
                    "journal_attempt": reply.journal_attempt,
                },
                tokens_in=reply.usage.input_tokens,
                tokens_out=reply.usage.output_tokens,
                cost_usd=reply.cost_usd,
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        return reply

    def _needs_repair(self, reply: ModelCallResult) -> bool:
        """A malformed reply gets a stricter re-ask, a bounded number of times, then fails."""
        malformed = [c for c in reply.tool_calls if c.error_kind == "malformed"]
        empty = not reply.tool_calls and not (reply.content or "").strip()
        if not malformed and not empty:
            self.malformed_streak = 0
            return False
        self.malformed_streak += 1
        problem = malformed[0].error if malformed else "the reply was empty"
        limit = self.spec.failures.malformed_output_repairs
        if self.malformed_streak > limit:
            raise RunEnded(
                RunStatus.FAILED,
                f"the model's output stayed malformed after {limit} repair attempt(s): {problem}",
            )
        for call in reply.tool_calls:
            self._tool_message(call.call_id, {"error": f"not run: {call.error or problem}"})
        self.pending_messages.append(
            {"role": "user", "content": policies.REPAIR_PROMPT.format(problem=problem)}
        )
        self._event("model.repair_requested", data={"problem": problem})
        return True

    async def _enforce_budget(self) -> None:
        """Over budget: a person may extend it (seeing what was spent) or end the run."""
        while over := policies.over_budget(
            self.budget, self.tokens_in + self.tokens_out, self.cost_usd
        ):
            if self.spec.failures.on_budget_exceeded == "fail":
                raise RunEnded(RunStatus.FAILED, over)
            spent = {
                "spent_tokens": self.tokens_in + self.tokens_out,
                "spent_cost_usd": self.cost_usd,
                **self.budget.model_dump(),
            }
            record = await self._await_human("budget", "budget", spent, reason=over)
            if record.decision == "rejected":
                raise RunEnded(RunStatus.CANCELLED, f"{over}; the budget was not extended")
            if record.decision == "expired":
                raise RunEnded(RunStatus.FAILED, f"{over}; nobody extended the budget in time")
            self.budget = policies.extend_budget(self.budget, self.spec.budget, record.edit)
            self._event("budget.extended", data=self.budget.model_dump())

    # ------------------------------------------------------------------ tool steps

    async def _tool_step(self, call: ProposedToolCall) -> None:
        if call.error is not None:
            # The model hears why and may revise; the tool never runs with bad arguments.
            self._event("tool.refused", data={"tool": call.tool, "error": call.error})
            self._tool_message(call.call_id, {"error": call.error})
            self.argument_streak += 1
            limit = self.spec.failures.argument_repairs
            if self.argument_streak > limit:
                raise RunEnded(
                    RunStatus.FAILED,
                    f"tool calls kept failing validation after {limit} re-asks: {call.error}",
                )
            return
        self.argument_streak = 0
        arguments = call.arguments or {}
        if self.spec.approval.needs_approval(call.tool, call.risk):
            approved = await self._approval_step(call.tool, arguments)
            if approved is None:
                self._tool_message(call.call_id, {"error": "the approver rejected this call"})
                return
            arguments = approved
        result, step_id = await self._run_tool(call, arguments)
        if not result.ok:
            self._tool_message(call.call_id, {"error": result.error})
        elif result.suspicious and not await self._screen(call.tool, result):
            withheld = "output withheld: quarantined as a suspected prompt injection"
            self._tool_message(call.call_id, {"error": withheld})
        else:
            # The output is in the step's mirror row already; the model reads it from there.
            self.pending_messages.append(
                {"role": "tool", "tool_call_id": call.call_id, STEP_OUTPUT_REF: step_id}
            )

    async def _run_tool(
        self, call: ProposedToolCall, arguments: JsonDict
    ) -> tuple[ToolCallResult, str]:
        """Run the call until it has an outcome; one key covers every re-run of it."""
        key: str | None = None
        resolution: Literal["rerun", "skip"] | None = None
        while True:
            step_id = self._new_step("tool_call", call.tool)
            key = key or idempotency_key(self.run_id, step_id, call.tool, arguments)
            self._set_status(RunStatus.WAITING_FOR_TOOL, step_id)
            await self._flush()
            started = workflow.now()
            attempts, timeout = policies.tool_limits(self.spec, call.tool)
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
                        heartbeat_seconds=self.spec.timeouts.heartbeat_seconds,
                        resolution=resolution,
                    ),
                    start_to_close_timeout=timedelta(seconds=timeout),
                    heartbeat_timeout=timedelta(seconds=self.spec.timeouts.heartbeat_seconds),
                    retry_policy=policies.retry_policy(self.spec, attempts),
                )
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                reason = policies.cause(err)
                result = ToolCallResult(ok=False, error=f"tool failed: {reason}")
                if policies.error_kind(err) == PERMISSION_DENIED:
                    if self.spec.failures.on_permission_denied == "pause":
                        self._record_tool_step(step_id, call, arguments, key, result, started)
                        await self._pause_for_admin(reason)
                        continue
                self.unresolved.append(f"{step_id}: {call.tool} failed: {reason}")
            self._record_tool_step(step_id, call, arguments, key, result, started)
            if not result.unknown_outcome:
                break
            decision = await self._await_human(
                "unknown_outcome",
                call.tool,
                {"idempotency_key": key, "arguments": arguments},
                reason=result.error,
            )
            # Approving says "it did not happen: run it"; anything else: do not repeat it.
            resolution = "rerun" if decision.decision == "approved" else "skip"
        if result.checkpoint_patch:
            await self._checkpoint_step(result.checkpoint_patch)
        return result, step_id

    def _record_tool_step(
        self,
        step_id: str,
        call: ProposedToolCall,
        arguments: JsonDict,
        key: str,
        result: ToolCallResult,
        started: datetime,
    ) -> None:
        if result.duplicate_prevented:
            self.duplicates_prevented += 1
            self._event("duplicate.prevented", step_id, {"idempotency_key": key})
        if result.reconciliation:
            self._event("tool.reconciled", step_id, {"key": key, "verdict": result.reconciliation})
        if call.side_effect and not result.unknown_outcome:
            self.side_effects.append(
                SideEffectRecord(
                    step_id=step_id,
                    tool=call.tool,
                    idempotency_key=key,
                    arguments=arguments,
                    ok=result.ok,
                    duplicate_prevented=result.duplicate_prevented,
                    reconciliation=result.reconciliation,
                    output=result.output,
                )
            )
        status = "completed" if result.ok else "failed"
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self._seq_of(step_id),
                type="tool_call",
                name=call.tool,
                status="unknown_outcome" if result.unknown_outcome else status,
                input=arguments,
                output=None,  # the accepted attempt wrote it; history need not carry it twice
                error=result.error,
                attempt=result.attempt,
                idempotency_key=key if call.side_effect else None,
                started_at=started,
                finished_at=workflow.now(),
            )
        )

    async def _screen(self, tool: str, result: ToolCallResult) -> bool:
        """A result that looks like a prompt injection waits for a person before the model
        sees it; returns whether the model may see it."""
        policy = self.spec.failures.on_suspected_injection
        self._event("tool.suspicious", data={"tool": tool, "patterns": result.suspicious})
        if policy == "allow":
            return True
        reason = f"{tool} returned text that looks like a prompt injection: {result.suspicious}"
        if policy == "fail":
            raise RunEnded(RunStatus.FAILED, reason)
        excerpt = json.dumps(result.output, default=str)[:2000]
        review = {"excerpt": excerpt, "patterns": result.suspicious}
        decision = await self._await_human("quarantine", tool, review, reason=reason)
        return decision.decision == "approved"

    # ------------------------------------------------------------------ people

    async def _approval_step(self, tool: str, arguments: JsonDict) -> JsonDict | None:
        """A risky call waits for a person; returns the arguments to run, or None."""
        record = await self._await_human("action", tool, arguments)
        if record.decision == "approved":
            return record.final_arguments
        if record.decision == "expired":
            raise RunEnded(RunStatus.FAILED, f"approval for {tool} expired unanswered")
        if self.spec.approval.on_reject == "cancel":
            raise RunEnded(RunStatus.CANCELLED, f"approval for {tool} rejected: {record.reason}")
        self._set_status(RunStatus.PLANNING)
        return None

    async def _await_human(
        self, kind: ApprovalKind, tool: str, arguments: JsonDict, reason: str | None = None
    ) -> ApprovalRecord:
        """Wait, holding no worker, for a person's decision, or for the approval to expire."""
        policy = self.spec.approval
        step_id = self._new_step("approval", tool)
        now = workflow.now()
        pending = PendingApproval(
            kind=kind,
            reason=reason,
            approval_id=step_id,
            step_id=step_id,
            tool=tool,
            arguments=arguments,
            # Actions keep the hash they had before other kinds existed: runs waiting on
            # one must still match the decisions people send them.
            action_hash=action_hash(tool if kind == "action" else f"{kind}:{tool}", arguments),
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
                input={
                    "kind": kind,
                    "arguments": arguments,
                    "required_role": pending.required_role,
                },
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
                seq=self._seq_of(step_id),
                type="approval",
                name=tool,
                status=record.decision,
                input={"kind": kind, "arguments": arguments},
                output=record.model_dump(mode="json"),
                started_at=now,
                finished_at=record.decided_at,
            )
        )
        self._event(f"approval.{record.decision}", step_id, {"by": record.by, "kind": kind})
        return record

    def _approval_record(
        self, pending: PendingApproval, decision: ApproveInput | RejectInput | None
    ) -> ApprovalRecord:
        expired = ApprovalRecord(
            kind=pending.kind,
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
            VerifyInput(
                run_id=self.run_id,
                step_id=step_id,
                answer=answer,
                spec=self.spec.verify,
                tools_used=sorted(
                    {
                        s.name
                        for s in self.steps
                        if s.type == "tool_call" and s.status == "completed"
                    }
                ),
            ),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=policies.retry_policy(self.spec, self.spec.timeouts.max_attempts),
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
        before, self.checkpoint = self.checkpoint, {**self.checkpoint, **patch}
        step_id = self._new_step("checkpoint", "merge")
        try:
            await workflow.execute_activity_method(
                MirrorActivities.save_checkpoint,
                CheckpointInput(run_id=self.run_id, step_id=step_id, checkpoint=self.checkpoint),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=MIRROR_RETRY,
            )
        except ApplicationError as err:
            if payload_limits.is_too_large(err):
                self.checkpoint = before  # the last one that fit, as the mirror holds it
            raise
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
            if self.indexed:
                workflow.upsert_search_attributes([search_attributes.STATUS.value_set(new.value)])
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

    def _fail_unsent_step(self, error: str) -> None:
        """The step whose input was refused never started: record it as failed."""
        last = self.steps[-1] if self.steps else None
        if last is None or last.status != "running":
            return
        self._complete_step(
            StepRecord(
                step_id=last.step_id,
                seq=last.seq,
                type=last.type,
                name=last.name,
                status="failed",
                error=f"{PAYLOAD_TOO_LARGE}: {error}",
                finished_at=workflow.now(),
            )
        )

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
        self.pending_messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content, default=str)}
        )

    def _priority(self) -> int:
        """The priority the server dispatches this run's steps at."""
        return workflow.info().priority.priority_key or fairness.DEFAULT_PRIORITY

    def _snapshot(self) -> RunSnapshot:
        self.version += 1
        return RunSnapshot(
            run_id=self.run_id,
            version=self.version,
            tenant=self.spec.tenant,
            user=self.spec.user,
            task=self.spec.task,
            priority=self._priority(),
            status=self.status,
            current_step_id=self.current_step_id,
            pause_reason=self.pause_reason,
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

    async def _flush(self, *, trim: Literal["records", "all"] | None = None) -> None:
        """Write what changed since the last flush to the mirror, as one idempotent batch."""
        batch = MirrorBatch(
            run=self._snapshot(),
            steps=self.pending_steps,
            events=self.pending_events,
            fence=workflow.info().get_current_history_length(),
        )
        self.pending_steps, self.pending_events = [], []
        sent = batch
        if trim == "records":  # the run row (its checkpoint) stays whole
            sent = batch.model_copy(
                update={
                    "steps": [payload_limits.trimmed(s) for s in batch.steps],
                    "events": [payload_limits.trimmed(e) for e in batch.events],
                }
            )
        elif trim == "all":
            sent = payload_limits.trimmed(batch)
        try:
            await self._sync(sent)
        except ApplicationError as err:
            if payload_limits.is_too_large(err):
                # Refused before it was sent: keep its rows for the run's final write.
                self.pending_steps = batch.steps + self.pending_steps
                self.pending_events = batch.events + self.pending_events
            raise

    async def _sync(self, batch: MirrorBatch) -> None:
        if workflow.patched(MIRROR_SYNC_AFTER_COMMIT):
            self.mirror_writes = [w for w in self.mirror_writes if not w.done()]
            self.mirror_writes.append(
                workflow.start_activity_method(
                    MirrorActivities.sync,
                    batch,
                    start_to_close_timeout=MIRROR_WRITE_TIMEOUT,
                    retry_policy=MIRROR_RETRY,
                    priority=MIRROR_PRIORITY,
                )
            )
        elif workflow.patched(MIRROR_SYNC_LOCAL):
            # Runs that wrote their mirror from local activities replay the way they did.
            await workflow.execute_local_activity_method(
                MirrorActivities.sync,
                batch,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=MIRROR_RETRY,
            )
        else:  # runs started before either patch replay the way they were recorded
            await workflow.execute_activity_method(
                MirrorActivities.sync,
                batch,
                start_to_close_timeout=MIRROR_WRITE_TIMEOUT,
                retry_policy=MIRROR_RETRY,
            )

    async def _mirror_written(self) -> None:
        """Wait until every mirror write in flight has landed."""
        writes, self.mirror_writes = self.mirror_writes, []
        for write in writes:
            await write

    async def _record_receipt(self) -> None:
        """The final mirror write and the receipt. If either would be refused as too large,
        it goes again with its long strings cut, so the run still ends recorded."""
        trims: list[Literal["records", "all"] | None] = [None, "records", "all"]
        for trim in trims:
            try:
                await self._flush(trim=trim)
                break
            except ApplicationError as err:
                if trim == "all" or not payload_limits.is_too_large(err):
                    raise
                if trim is None:
                    self._event("run.record_trimmed", data={"reason": err.message})
        await self._mirror_written()  # the receipt comes after every row it sums up
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
        try:
            await self._store_receipt(receipt)
        except ApplicationError as err:
            if not payload_limits.is_too_large(err):
                raise
            await self._store_receipt(payload_limits.trimmed(receipt))

    async def _store_receipt(self, receipt: Receipt) -> None:
        try:
            await self._send_receipt(receipt)
        except ActivityError as err:
            # The activity stores the receipt before it returns it: only the echo was refused.
            if err.cause is None or not payload_limits.is_too_large(err.cause):
                raise

    async def _send_receipt(self, receipt: Receipt) -> None:
        await workflow.execute_activity_method(
            MirrorActivities.record_receipt,
            receipt,
            start_to_close_timeout=MIRROR_WRITE_TIMEOUT,
            retry_policy=MIRROR_RETRY,
        )
