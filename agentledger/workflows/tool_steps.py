"""Tool steps: a proposed tool call run to an outcome, exactly once where it has an effect.

A component of AgentRunWorkflow. A call with bad arguments is refused (the model hears why);
a call for another agent is a sub-agent's run; a risky one waits for a person's approval
first; a call whose outcome is unknown waits for a person to say whether to run it again; a
result that looks like a prompt injection waits for a person before the model sees it; a
result's checkpoint patch is saved as a step of its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    TimeoutError,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

from agentledger.workflows.approvals import Approvals
from agentledger.workflows.recording import MIRROR_RETRY, RunContext
from agentledger.workflows.run_messages import RunControls
from agentledger.workflows.run_state import RunEnded
from agentledger.workflows.steps import Step
from agentledger.workflows.subagents import Subagents

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.mirror import MirrorActivities
    from agentledger.activities.tools import ToolActivities
    from agentledger.core import constants as names
    from agentledger.core import errors, payload_limits, run_summaries
    from agentledger.core._state import RunProgress
    from agentledger.core.errors import PERMISSION_DENIED
    from agentledger.core.events import EventType
    from agentledger.core.keys import canonical_json, effect_content, effect_key
    from agentledger.core.results import INTERRUPTED, SideEffectRecord
    from agentledger.core.spec import JsonDict
    from agentledger.core.states import RunStatus, StepStatus
    from agentledger.core.wire import (
        CheckpointInput,
        MirrorBatch,
        ProposedToolCall,
        ToolCallInput,
        ToolCallResult,
    )
    from agentledger.workflows import policies


def tool_message(progress: RunProgress, call_id: str, content: object) -> None:
    """What the model hears of a tool call it proposed, in the conversation's next turn."""
    progress.pending_messages.append(
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content, default=str)}
    )


async def outlast_cancel(
    activity: workflow.ActivityHandle[ToolCallResult],
) -> tuple[ToolCallResult, bool]:
    """Await an activity through a cancel of the run: the cancel goes on to the activity,
    and the run learns how its attempt ended. Returns (result, whether a cancel came); an
    attempt that stopped raises its cancellation."""
    try:
        return await asyncio.shield(activity), False
    except asyncio.CancelledError:
        if not activity.done():  # it may have finished in the same activation as the cancel
            activity.cancel()
        try:
            return await activity, True
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            # The attempt failed while the run was being cancelled: the run still ends.
            raise asyncio.CancelledError("cancelled on request") from err


async def as_remote(call: Awaitable[ToolCallResult]) -> ToolCallResult:
    """A local activity's outcome as a remote one's: its final failure arrives bare, and is
    raised as the ActivityError a remote call's would be (errors.as_activity_error), so the
    step fails and the model hears why, where a bare one would fail the run."""
    try:
        return await call
    except (ApplicationError, TimeoutError) as err:
        raise errors.as_activity_error(err, names.ACTIVITY_TOOL_INVOKE) from err


class ToolSteps:
    """The run's tool calls, each a step (or, awaiting a person, several)."""

    def __init__(
        self,
        run: RunContext,
        approvals: Approvals,
        subagents: Subagents,
        controls: RunControls,
    ) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        self.approvals, self.subagents, self.controls = approvals, subagents, controls

    async def step(self, call: ProposedToolCall) -> None:
        if call.error is not None:
            # The model hears why and may revise; the tool never runs with bad arguments.
            self.recorder.event(
                EventType.TOOL_REFUSED, data={"tool": call.tool, "error": call.error}
            )
            tool_message(self.progress, call.call_id, {"error": call.error})
            self.progress.argument_streak += 1
            limit = self.spec.failures.argument_repairs
            if self.progress.argument_streak > limit:
                raise RunEnded(
                    RunStatus.FAILED,
                    f"tool calls kept failing validation after {limit} re-asks: {call.error}",
                )
            return
        self.progress.argument_streak = 0
        if self.subagents.is_call(call):  # a task for another agent: a child run
            await self.subagents.step(call)
            await self.approvals.enforce_budget()
            return
        arguments = call.arguments or {}
        denied = self.spec.approval.denies(call.tool, arguments)
        if denied is not None:
            # The tenant's (or the agent's) policy forbids it: it never runs, nobody is asked.
            why = f"the policy denies this call ({denied.text()})"
            self.recorder.event(
                EventType.TOOL_DENIED, data={"tool": call.tool, "rule": denied.text()}
            )
            tool_message(self.progress, call.call_id, {"error": why})
            return
        if self.spec.approval.needs_approval(call.tool, call.risk, arguments):
            approved = await self.approvals.approval_step(
                call.tool, arguments, call.parameters, call.risk.value, summary=call.summary
            )
            if approved is None:
                tool_message(
                    self.progress, call.call_id, {"error": "the approver rejected this call"}
                )
                return
            arguments = approved
        result, step_id = await self._run_tool(call, arguments)
        if not result.ok:
            tool_message(self.progress, call.call_id, {"error": result.error})
        elif result.suspicious and not await self._screen(call.tool, result):
            withheld = "output withheld: quarantined as a suspected prompt injection"
            tool_message(self.progress, call.call_id, {"error": withheld})
        else:
            # The output is in the step's mirror row already; the model reads it from there.
            self.progress.pending_messages.append(
                {"role": "tool", "tool_call_id": call.call_id, names.STEP_OUTPUT_REF: step_id}
            )

    async def _run_tool(
        self, call: ProposedToolCall, arguments: JsonDict
    ) -> tuple[ToolCallResult, str]:
        """Run the call until it has an outcome; one key covers every re-run of it."""
        key: str | None = None
        resolution: Literal["rerun", "skip"] | None = None
        while True:
            async with self.recorder.step("tool_call", call.tool, input=arguments) as step:
                key = key or self._effect_key(call.tool, arguments)
                attempts, timeout = policies.tool_limits(self.spec, call.tool)
                waits = call.side_effect
                local = policies.runs_locally(self.spec, call)
                tool_input = ToolCallInput(
                    run_id=self.run_id,
                    step_id=step.id,
                    seq=self.progress.seq,
                    tool=call.tool,
                    arguments=arguments,
                    idempotency_key=key,
                    checkpoint=self.progress.checkpoint,
                    heartbeat_seconds=self.spec.timeouts.heartbeat_seconds,
                    resolution=resolution,
                    call_id=call.call_id,
                )
                invoke = await step.start(
                    functools.partial(
                        self._start_tool,
                        tool_input,
                        attempts,
                        timeout,
                        waits,
                        local=local,
                    )
                )
                cancelled = False
                try:
                    if waits:
                        result, cancelled = await step.outcome(outlast_cancel(invoke))
                    else:
                        result = await step.outcome(as_remote(invoke) if local else invoke)
                except (ActivityError, asyncio.CancelledError) as err:
                    if is_cancelled_exception(err):
                        if waits:
                            self._record_interrupted(step, call, key)
                        raise
                    assert isinstance(err, ActivityError)
                    reason = errors.cause(err)
                    result = ToolCallResult(
                        ok=False,
                        error=f"tool failed: {reason}",
                        attempt=errors.attempts_made(err, attempts),
                    )
                    if errors.error_kind(err) == PERMISSION_DENIED:
                        if self.spec.failures.on_permission_denied == "pause":
                            self._record_tool_step(step, call, key, result)
                            await self.controls.pause_for_admin(reason)
                            continue
                    self.progress.unresolved.append(f"{step.id}: {call.tool} failed: {reason}")
                self._record_tool_step(step, call, key, result)
                if cancelled:  # the attempt finished before the cancel reached it: now end
                    raise asyncio.CancelledError("cancelled on request")
            if not result.unknown_outcome:
                break
            decision = await self.approvals.await_human(
                "unknown_outcome",
                call.tool,
                {"idempotency_key": key, "arguments": arguments},
                reason=result.error,
            )
            if decision.decision == "expired":
                self.progress.unresolved.append(
                    f"{step.id}: whether {call.tool} happened is unknown (key {key}); "
                    "nobody decided in time"
                )
                raise RunEnded(
                    RunStatus.FAILED,
                    f"the outcome of {call.tool} (key {key}) is unknown and nobody decided it",
                )
            # Approving says "it did not happen: run it"; rejecting: "it happened".
            resolution = "rerun" if decision.decision == "approved" else "skip"
        if result.checkpoint_patch:
            await self._checkpoint_step(result.checkpoint_patch)
        return result, step.id

    def _start_tool(
        self,
        input: ToolCallInput,
        attempts: int,
        timeout: float,
        waits: bool,
        mirror: MirrorBatch | None,
        *,
        local: bool = False,
    ) -> workflow.ActivityHandle[ToolCallResult]:
        if local:  # a read-only tool, asked to run in the workflow task (policies.runs_locally)
            return workflow.start_local_activity_method(
                ToolActivities.invoke,
                input.model_copy(update={"mirror": mirror}),
                start_to_close_timeout=timedelta(seconds=timeout),
                retry_policy=policies.retry_policy(self.spec, attempts),
                summary=run_summaries.tool_summary(input.tool, input.arguments),
            )
        return workflow.start_activity_method(
            ToolActivities.invoke,
            input.model_copy(update={"mirror": mirror}),
            start_to_close_timeout=timedelta(seconds=timeout),
            heartbeat_timeout=timedelta(seconds=self.spec.timeouts.heartbeat_seconds),
            retry_policy=policies.retry_policy(self.spec, attempts),
            summary=run_summaries.tool_summary(input.tool, input.arguments),
            cancellation_type=(
                ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if waits
                else ActivityCancellationType.TRY_CANCEL
            ),
        )

    def _effect_key(self, tool: str, arguments: JsonDict) -> str:
        parent = workflow.info().parent
        key = self.spec.idempotency_key
        # A backlog task's attempts are runs of their own; its effects are the task's.
        scope = f"{parent.workflow_id}/{key}" if parent is not None and key else self.run_id
        fork = self.spec.fork
        if fork is not None and fork.effect_scope is not None:
            # A fork's effects are its parent's: a call the parent made (same content, same
            # count) finds the parent's ledger row and does not happen a second time.
            scope = fork.effect_scope
        content = canonical_json(arguments)
        before = sum(
            1
            for effect in self.progress.side_effects
            if effect.ok and effect.tool == tool and canonical_json(effect.arguments) == content
        ) + self.progress.inherited_effects.count(effect_content(tool, arguments))
        return effect_key(scope, tool, arguments, before)

    def _record_interrupted(self, step: Step, call: ProposedToolCall, key: str) -> None:
        """A side-effecting call the run was cancelled in: its attempt stopped, but whether
        the effect committed first only the ledger knows; the receipt asks it (key)."""
        self.progress.side_effects.append(
            SideEffectRecord(
                step_id=step.id,
                tool=call.tool,
                idempotency_key=key,
                arguments=step.input,
                ok=False,
                duplicate_prevented=False,
                reconciliation=INTERRUPTED,
            )
        )
        step.end(
            StepStatus.CANCELLED, error="the run was cancelled during the call", idempotency_key=key
        )

    def _record_tool_step(
        self, step: Step, call: ProposedToolCall, key: str, result: ToolCallResult
    ) -> None:
        if result.duplicate_prevented:
            self.progress.duplicates_prevented += 1
            self.recorder.event(EventType.DUPLICATE_PREVENTED, step.id, {"idempotency_key": key})
        if result.reconciliation:
            self.recorder.event(
                EventType.TOOL_RECONCILED, step.id, {"key": key, "verdict": result.reconciliation}
            )
        if call.side_effect and not result.unknown_outcome:
            self.progress.side_effects.append(
                SideEffectRecord(
                    step_id=step.id,
                    tool=call.tool,
                    idempotency_key=key,
                    arguments=step.input,
                    ok=result.ok,
                    duplicate_prevented=result.duplicate_prevented,
                    reconciliation=result.reconciliation,
                    output=result.output,
                )
            )
        status = StepStatus.COMPLETED if result.ok else StepStatus.FAILED
        step.end(
            StepStatus.UNKNOWN_OUTCOME if result.unknown_outcome else status,
            output=None,  # the accepted attempt wrote it; history need not carry it twice
            error=result.error,
            attempt=result.attempt,
            idempotency_key=key if call.side_effect else None,
        )

    async def _screen(self, tool: str, result: ToolCallResult) -> bool:
        """A result that looks like a prompt injection waits for a person before the model
        sees it; returns whether the model may see it."""
        policy = self.spec.failures.on_suspected_injection
        self.recorder.event(
            EventType.TOOL_SUSPICIOUS, data={"tool": tool, "patterns": result.suspicious}
        )
        if policy == "allow":
            return True
        reason = f"{tool} returned text that looks like a prompt injection: {result.suspicious}"
        if policy == "fail":
            raise RunEnded(RunStatus.FAILED, reason)
        excerpt = json.dumps(result.output, default=str)[:2000]
        review = {"excerpt": excerpt, "patterns": result.suspicious}
        decision = await self.approvals.await_human("quarantine", tool, review, reason=reason)
        return decision.decision == "approved"

    async def _checkpoint_step(self, patch: JsonDict) -> None:
        before, self.progress.checkpoint = (
            self.progress.checkpoint,
            {**self.progress.checkpoint, **patch},
        )
        async with self.recorder.step("checkpoint", "merge", input=patch) as step:
            try:
                await workflow.execute_activity_method(
                    MirrorActivities.save_checkpoint,
                    CheckpointInput(
                        run_id=self.run_id,
                        step_id=step.id,
                        checkpoint=self.progress.checkpoint,
                        fence=workflow.info().get_current_history_length(),
                    ),
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=MIRROR_RETRY,
                    summary="checkpoint save",
                )
            except ApplicationError as err:
                if payload_limits.is_too_large(err):
                    # The last one that fit, as the mirror holds it.
                    self.progress.checkpoint = before
                raise
