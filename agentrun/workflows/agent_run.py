"""AgentRun: one agent run as one Temporal workflow.

The loop is: decide (model call), act (tool calls, some behind a human approval), verify,
finish with a receipt. This module holds the deciding; people's decisions are in
agentrun/workflows/approvals.py, the record of the run (steps, events, mirror, receipt) in
agentrun/workflows/recording.py, and the run's state, declared once, in `RunProgress`
(agentrun/workflows/run_state.py derives the rest from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityCancellationType

from agentrun.workflows import run_endings, run_state
from agentrun.workflows.approvals import Approvals
from agentrun.workflows.changes import Changes
from agentrun.workflows.recording import MIRROR_RETRY
from agentrun.workflows.run_messages import RunMessages
from agentrun.workflows.run_state import RunEnded
from agentrun.workflows.run_stream import RunStream
from agentrun.workflows.sessions import Sessions
from agentrun.workflows.steering import Interrupted
from agentrun.workflows.subagents import Subagents

with workflow.unsafe.imports_passed_through():
    # The model's and the judge's activities are called by name: their modules load the
    # model SDK, which a client importing this workflow (the CLI) has no use for.
    from agentrun.activities.fork import ForkActivities
    from agentrun.activities.mirror import MirrorActivities
    from agentrun.activities.tools import ToolActivities
    from agentrun.core import constants as names
    from agentrun.core import errors, payload_limits, run_summaries, search_attributes
    from agentrun.core._state import RunInput, RunProgress
    from agentrun.core._wire import (
        CheckpointInput,
        ForkSeedInput,
        MirrorBatch,
        ModelCallInput,
        ModelCallResult,
        ProposedToolCall,
        RunEvent,
        StepRecord,
        ToolCallInput,
        ToolCallResult,
        VerifyInput,
    )
    from agentrun.core.admission_models import ReleaseInput
    from agentrun.core.errors import PERMISSION_DENIED
    from agentrun.core.keys import canonical_json, effect_content, effect_key
    from agentrun.core.results import (
        INTERRUPTED,
        ForkOrigin,
        RunResult,
        SideEffectRecord,
        StepSummary,
        VerifyResult,
    )
    from agentrun.core.spec import JsonDict
    from agentrun.core.states import RunStatus
    from agentrun.workflows import policies

# The system message when the spec carries no instructions (an agent profile sets them):
# runs started without a profile, and histories from before profiles, which replay as they ran.
SYSTEM_PROMPT = (
    "You are a careful agent. Use the tools you are given when they help, one step at a "
    "time. When the task is done, reply with a final answer in Markdown that starts with "
    "a '## Summary' section."
)


async def shielded(work: Coroutine[Any, Any, Any]) -> None:
    """Run `work` to its end, whatever cancels the caller meanwhile (the run has ended; a
    late cancel changes nothing it reports)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
    task.result()


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


@workflow.defn(name=names.WORKFLOW_NAME)
class AgentRunWorkflow(Approvals, RunMessages, Sessions, Subagents):
    @workflow.init
    def __init__(self, spec: RunInput) -> None:
        self.changes = Changes(spec.workflow_generation)
        self.spec = spec
        self.run_id = workflow.info().workflow_id
        # Only runs started with the search attributes keep them current (see the module).
        self.indexed_status = workflow.info().typed_search_attributes.get(search_attributes.STATUS)
        self.pending_steps: list[StepRecord] = []
        self.pending_events: list[RunEvent] = []
        self.mirror_writes: list[workflow.ActivityHandle[None]] = []
        self.forwards: set[asyncio.Future[None]] = set()
        if spec.carry is not None:  # a continuation: pick up exactly where the last left off
            self.progress = spec.carry.model_copy(deep=True)
        else:
            self.progress = RunProgress(
                started_at=workflow.now(),
                model_used=spec.model.model,
                budget=spec.budget,
                # A run started by its tenant's admission queue waits for a slot (only runs
                # whose input names a queue take that path, so older histories replay
                # unchanged); a continuation was admitted long ago.
                admitted=spec.admission is None,
                pending_messages=[
                    {"role": "system", "content": spec.instructions or SYSTEM_PROMPT},
                    {"role": "user", "content": spec.task},
                ],
            )
        self.stream = RunStream(self.progress.stream_state)
        self.progress.stream_state = None  # the stream holds it now; set again at the carry
        if spec.carry is None:
            # Here, not in `run`: a signal delivered with the start runs its handler before
            # `run`, and the story must still begin with the start.
            self._event("run.started", data={"tenant": spec.tenant, "user": spec.user})

    async def _continue_as_new_if_long(self) -> None:
        """Past the history limit, start afresh with the carried state, between steps."""
        info = workflow.info()
        if not (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.spec.history_events_limit
        ):
            return
        await self._continue_as_new()

    async def _continue_as_new(self) -> None:
        self._event("run.continued_as_new", data={"generation": self.progress.generation + 1})
        await self._flush()
        self.stream.detach()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._mirror_written()
        # Handlers that ran while the run waited emitted events: they go too.
        while self.pending_events or self.pending_steps:
            await self._flush()
            await workflow.wait_condition(workflow.all_handlers_finished)
            await self._mirror_written()
        if self.spec.session is not None:
            self._leave_in_mirror()
        self.progress.stream_state = self.stream.carry()
        carry = run_state.carry(self.progress)
        workflow.continue_as_new(self.spec.model_copy(update={"carry": carry}))

    # ------------------------------------------------------------------ the run

    @workflow.run
    async def run(self, spec: RunInput) -> RunResult:
        cancelled = False
        try:
            await self._wait_for_slot()
            if spec.fork is not None and spec.carry is None:
                # Only runs started by `agentrun fork` carry `fork`: no recorded history
                # takes this path, so it needs no patch.
                await self._start_from_fork(spec.fork)
            await self._agent_loop()
        except RunEnded as end:
            self._finish(end.status, error=end.reason)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                assert isinstance(err, ActivityError)
                self._finish(
                    RunStatus.FAILED, error=f"{err.activity_type} failed: {errors.cause(err)}"
                )
            else:
                self._finish(RunStatus.CANCELLED, error="cancelled on request")
                cancelled = True
        except ApplicationError as err:
            # An input Temporal would refuse (agentrun.core.payload_limits): end the run with the
            # reason rather than fail the workflow task, which Temporal retries for ever.
            if not payload_limits.is_too_large(err):
                raise
            self._fail_unsent_step(err.message)
            self._finish(RunStatus.FAILED, error=err.message)
        # The run has ended: a cancel that comes now must not cost it its receipt.
        await shielded(self._record_receipt())
        await shielded(self._release_slot())
        self.stream.detach()  # watchers read the rest once the run has closed
        await shielded(workflow.wait_condition(workflow.all_handlers_finished))
        if cancelled:
            # The receipt is written; now Temporal shows the run as cancelled too.
            raise asyncio.CancelledError("cancelled on request")
        result = RunResult(
            run_id=self.run_id,
            status=self.progress.status,
            answer=self.progress.answer,
            error=self.progress.error,
            tokens_in=self.progress.tokens_in,
            tokens_out=self.progress.tokens_out,
            cost_usd=self.progress.cost_usd,
        )
        if self.changes.generation_5:  # Temporal ends the run as agentrun does
            if result.status == RunStatus.FAILED:
                raise run_endings.failure(result)
            if result.status == RunStatus.CANCELLED:
                await run_endings.cancel_own(result.error or "cancelled")
        return result

    async def _wait_for_slot(self) -> None:
        """Stay `queued` until the tenant's admission queue says a slot is ours."""
        if self.progress.admitted:
            if self.spec.admission is not None and self.spec.carry is None:
                # The slot came with the run's first task, before it could wait: still on record.
                self._event("run.admitted")
            return
        self._event("run.queued", data={"admission": self.spec.admission})
        await self._flush()
        await workflow.wait_condition(lambda: self.progress.admitted)
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
        if self.spec.session is None:
            await self._work()
            return
        # A session (agentrun/workflows/sessions.py): a turn per message until it is idle.
        if self.progress.status != RunStatus.WAITING_FOR_MESSAGE:
            # The first turn, or the one a continuation of the session was working on.
            if not self.progress.turns:
                self._open_turn()
            await self._work()
        while await self._next_message():
            self._open_turn()
            await self._work()
        self._finish(RunStatus.COMPLETED, answer=self.progress.answer)

    async def _work(self) -> None:
        """Work on the task (a session: the turn) until its answer passes its checks."""
        while self._calls_left():
            await self._step_boundary()
            await self._continue_as_new_if_long()
            self._take_messages()  # steering: what people said since the last call
            try:
                reply = await self._model_step()
            except Interrupted:
                continue
            self.progress.model_calls += 1
            await self._enforce_budget()
            if self._needs_repair(reply):
                continue
            if reply.tool_calls:
                for call in reply.tool_calls:
                    await self._step_boundary()
                    await self._tool_step(call)
                continue
            if self._replan_for_messages():  # said as the model answered
                continue
            answer = reply.content or ""
            verdict = await self._verify_step(answer, reply.verdict)
            if verdict.judge_model is not None:
                await self._enforce_budget()
            if verdict.passed and self._replan_for_messages():  # said as a judge checked
                continue
            if verdict.passed and self.spec.session is not None:
                await self._turn_answered(answer)
                return
            if verdict.passed:
                self._finish(RunStatus.COMPLETED, answer=answer)
                return
            self.progress.verify_rounds += 1
            if (
                self.spec.verify.on_failure == "fail"
                or self.progress.verify_rounds >= self.spec.verify.max_rounds
            ):
                raise RunEnded(
                    RunStatus.FAILED, "verification failed: " + "; ".join(verdict.failures)
                )
            self.progress.pending_messages.append(
                {
                    "role": "user",
                    "content": "Your answer failed verification: "
                    + "; ".join(verdict.failures)
                    + ". Reply again with a corrected final answer.",
                }
            )
        raise RunEnded(RunStatus.FAILED, f"step limit reached ({self.spec.max_steps} model calls)")

    async def _start_from_fork(self, origin: ForkOrigin) -> None:
        """Take the parent's steps before the fork point as recorded (no model call, tool
        call or side effect again: `fork.seed` only reads and copies), then go on live from
        step N, or with the edited output standing for step N's result."""
        seed = await workflow.execute_activity_method(
            ForkActivities.seed,
            ForkSeedInput(run_id=self.run_id, origin=origin, allowed_tools=self.spec.allowed_tools),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=policies.retry_policy(self.spec, self.spec.timeouts.max_attempts),
            summary=f"fork of {origin.parent_run_id} from step {origin.from_step}",
        )
        for record in seed.steps:
            self.progress.steps.append(
                StepSummary(
                    step_id=record.step_id,
                    seq=record.seq,
                    type=record.type,
                    name=record.name,
                    status=record.status,
                    attempt=record.attempt,
                )
            )
            self.pending_steps.append(record)
        self.progress.seq = origin.from_step - 1
        self.progress.inherited_effects = seed.inherited_effects
        self.progress.model_calls = seed.model_calls
        self.progress.stored_messages = seed.stored_messages
        self.progress.pending_messages = []
        self._event(
            "run.forked",
            data={
                "parent_run_id": origin.parent_run_id,
                "from_step": origin.from_step,
                "seeded_steps": [s.step_id for s in seed.steps],
                "edited": seed.edited_call is not None,
            },
        )
        if seed.edited_call is not None:
            call = seed.edited_call
            step_id = self._new_step("tool_call", call.tool)
            now = workflow.now()
            self._complete_step(
                StepRecord(
                    step_id=step_id,
                    seq=self.progress.seq,
                    type="tool_call",
                    name=call.tool,
                    status="completed",
                    input=call.arguments or {},
                    output=origin.edit_output,
                    started_at=now,
                    finished_at=now,
                )
            )
            self._event("fork.output_edited", step_id, {"tool": call.tool, "ran": False})
            self._tool_message(call.call_id, origin.edit_output)
        if seed.live_calls:
            # The fork goes on from inside its parent's reply, as a run does once the model
            # has answered (a queued run cannot wait for a tool or a person). Forks that
            # reached this point wedged before it (issue 25): no history needs the old path.
            self._set_status(RunStatus.PLANNING)
        for call in seed.live_calls:
            await self._step_boundary()
            await self._tool_step(call)

    async def _step_boundary(self) -> None:
        """Where a pause takes effect: between steps, never inside one."""
        if not self.progress.pause_requested:
            return
        self._set_status(RunStatus.PAUSED)
        self._event("run.paused", data={"reason": self.progress.pause_reason})
        await self._flush()
        await workflow.wait_condition(lambda: not self.progress.pause_requested)
        self.progress.pause_reason = None
        self._event("run.resumed")

    async def _pause_for_admin(self, reason: str) -> None:
        """A failure no retry can fix (a refused permission): wait for a person to resume."""
        self.progress.pause_requested, self.progress.pause_reason = True, reason
        self._event("run.needs_admin", data={"reason": reason})
        await self._step_boundary()

    # ------------------------------------------------------------------ model steps

    async def _model_step(self) -> ModelCallResult:
        """One decision. When the primary keeps failing, the run moves to the fallback model
        and stays there."""
        failures = self.spec.failures
        models = [self.spec.model.model]
        providers = [self.spec.model.provider]
        if failures.fallback_model:
            models.append(failures.fallback_model)
            providers.append(failures.fallback_provider)
        while True:
            index = min(self.progress.model_choice, len(models) - 1)
            last = index == len(models) - 1
            attempts = (
                self.spec.timeouts.max_attempts if last else failures.model_attempts_before_fallback
            )
            try:
                return await self._call_model(models[index], attempts, providers[index])
            except ActivityError as err:
                if is_cancelled_exception(err):
                    raise
                kind = errors.error_kind(err)
                if kind == PERMISSION_DENIED and failures.on_permission_denied == "pause":
                    await self._pause_for_admin(f"model provider refused: {errors.cause(err)}")
                    continue
                if last or kind in errors.FINAL_ERRORS:
                    raise
                self._event(
                    "model.fallback",
                    data={"from": models[index], "to": models[index + 1], "reason": kind},
                )
                self.progress.model_choice = index + 1

    async def _call_model(
        self, model: str | None, attempts: int, provider: str | None = None
    ) -> ModelCallResult:
        step_id = self._new_step("model_call", model or self.progress.model_used or "model")
        self._set_status(RunStatus.PLANNING, step_id)
        batch = await self._batch_for_step()
        started = workflow.now()
        timeouts = self.spec.timeouts
        call, carried = await self._start_step(
            lambda mirror: self._model_call(
                ModelCallInput(
                    run_id=self.run_id,
                    step_id=step_id,
                    seq=self.progress.seq,
                    model=model,
                    new_messages=self.progress.pending_messages,
                    first_index=self.progress.stored_messages,
                    allowed_tools=self.spec.allowed_tools,
                    temperature=self.spec.model.temperature,
                    max_tokens=self.spec.model.max_tokens,
                    heartbeat_seconds=timeouts.heartbeat_seconds,
                    timeout_seconds=timeouts.model_seconds,
                    mirror=mirror,
                    provider=provider,
                    cut=self._conversation_cut(),
                    approval_at=self.spec.approval.require_at_or_above,
                    approval_always=self.spec.approval.always,
                    **self._checks_for_reply(),
                    **self._subagent_tools(),
                ),
                attempts,
                run_summaries.model_summary(
                    model or self.progress.model_used or "(the worker's default)",
                    self.progress.tokens_in + self.progress.tokens_out,
                ),
            ),
            batch,
        )
        try:
            reply: ModelCallResult = await self._step_result(
                self._model_reply_or_message(call, step_id, model or "model", started), carried
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
                        error=f"{errors.error_kind(err)}: {errors.cause(err)}",
                        attempt=attempts,
                        started_at=started,
                        finished_at=workflow.now(),
                    )
                )
            raise
        # A watcher's pending poll completes in this task: an update's completion.
        self.stream.publish_rest_of_reply(step_id, reply)  # before its step.completed event
        self.progress.stored_messages += len(self.progress.pending_messages)
        self.progress.pending_messages = []
        self.progress.model_used = reply.model
        self.progress.spend(reply.usage.input_tokens, reply.usage.output_tokens, reply.cost_usd)
        if not reply.priced and reply.model not in self.progress.unpriced_models:
            self.progress.unpriced_models.append(reply.model)
        self.progress.pending_messages.append(reply.assistant_message)
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
                    **({} if reply.priced else {"priced": False}),
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
            self.progress.malformed_streak = 0
            return False
        self.progress.malformed_streak += 1
        problem = malformed[0].error if malformed else "the reply was empty"
        limit = self.spec.failures.malformed_output_repairs
        if self.progress.malformed_streak > limit:
            raise RunEnded(
                RunStatus.FAILED,
                f"the model's output stayed malformed after {limit} repair attempt(s): {problem}",
            )
        for call in reply.tool_calls:
            self._tool_message(call.call_id, {"error": f"not run: {call.error or problem}"})
        self.progress.pending_messages.append(
            {"role": "user", "content": policies.REPAIR_PROMPT.format(problem=problem)}
        )
        self._event("model.repair_requested", data={"problem": problem})
        return True

    async def _enforce_budget(self) -> None:
        """Over budget: a person may extend it (seeing what was spent) or end the run."""
        while over := policies.over_budget(
            self.progress.budget,
            self.progress.tokens_in + self.progress.tokens_out,
            self.progress.cost_usd,
        ):
            if self.spec.failures.on_budget_exceeded == "fail":
                raise RunEnded(RunStatus.FAILED, over)
            spent = {
                "spent_tokens": self.progress.tokens_in + self.progress.tokens_out,
                "spent_cost_usd": self.progress.cost_usd,
                **self.progress.budget.model_dump(),
            }
            record = await self._await_human("budget", "budget", spent, reason=over)
            if record.decision == "rejected":
                raise RunEnded(RunStatus.CANCELLED, f"{over}; the budget was not extended")
            if record.decision == "expired":
                raise RunEnded(RunStatus.FAILED, f"{over}; nobody extended the budget in time")
            self.progress.budget = policies.extend_budget(
                self.progress.budget,
                self.spec.budget,
                record.edit,
                spent=(spent["spent_tokens"], spent["spent_cost_usd"]),
            )
            self._event("budget.extended", data=self.progress.budget.model_dump())

    # ------------------------------------------------------------------ tool steps

    async def _tool_step(self, call: ProposedToolCall) -> None:
        if call.error is not None:
            # The model hears why and may revise; the tool never runs with bad arguments.
            self._event("tool.refused", data={"tool": call.tool, "error": call.error})
            self._tool_message(call.call_id, {"error": call.error})
            self.progress.argument_streak += 1
            limit = self.spec.failures.argument_repairs
            if self.progress.argument_streak > limit:
                raise RunEnded(
                    RunStatus.FAILED,
                    f"tool calls kept failing validation after {limit} re-asks: {call.error}",
                )
            return
        self.progress.argument_streak = 0
        if self._is_subagent_call(call):  # a task for another agent: a child run
            await self._subagent_step(call)
            await self._enforce_budget()
            return
        arguments = call.arguments or {}
        if self.spec.approval.needs_approval(call.tool, call.risk):
            approved = await self._approval_step(call.tool, arguments, call.parameters)
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
            step_id = self._new_step("tool_call", call.tool)
            key = key or self._effect_key(step_id, call.tool, arguments)
            self._set_status(RunStatus.WAITING_FOR_TOOL, step_id)
            batch = await self._batch_for_step()
            started = workflow.now()
            attempts, timeout = policies.tool_limits(self.spec, call.tool)
            waits = call.side_effect
            tool_input = ToolCallInput(
                run_id=self.run_id,
                step_id=step_id,
                seq=self.progress.seq,
                tool=call.tool,
                arguments=arguments,
                idempotency_key=key,
                checkpoint=self.progress.checkpoint,
                heartbeat_seconds=self.spec.timeouts.heartbeat_seconds,
                resolution=resolution,
                call_id=call.call_id,
            )
            invoke, carried = await self._start_step(
                functools.partial(
                    self._start_tool,
                    tool_input,
                    attempts,
                    timeout,
                    waits,
                    local=policies.runs_locally(self.spec, call),
                ),
                batch,
            )
            cancelled = False
            try:
                if waits:
                    result, cancelled = await self._step_result(outlast_cancel(invoke), carried)
                else:
                    result = await self._step_result(invoke, carried)
            except (ActivityError, asyncio.CancelledError) as err:
                if is_cancelled_exception(err):
                    if waits:
                        self._record_interrupted(step_id, call, arguments, key, started)
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
                        self._record_tool_step(step_id, call, arguments, key, result, started)
                        await self._pause_for_admin(reason)
                        continue
                self.progress.unresolved.append(f"{step_id}: {call.tool} failed: {reason}")
            self._record_tool_step(step_id, call, arguments, key, result, started)
            if cancelled:  # the attempt finished before the cancel reached it: now end
                raise asyncio.CancelledError("cancelled on request")
            if not result.unknown_outcome:
                break
            decision = await self._await_human(
                "unknown_outcome",
                call.tool,
                {"idempotency_key": key, "arguments": arguments},
                reason=result.error,
            )
            if decision.decision == "expired":
                self.progress.unresolved.append(
                    f"{step_id}: whether {call.tool} happened is unknown (key {key}); "
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
        return result, step_id

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

    def _effect_key(self, step_id: str, tool: str, arguments: JsonDict) -> str:
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

    def _record_interrupted(
        self,
        step_id: str,
        call: ProposedToolCall,
        arguments: JsonDict,
        key: str,
        started: datetime,
    ) -> None:
        """A side-effecting call the run was cancelled in: its attempt stopped, but whether
        the effect committed first only the ledger knows; the receipt asks it (key)."""
        self.progress.side_effects.append(
            SideEffectRecord(
                step_id=step_id,
                tool=call.tool,
                idempotency_key=key,
                arguments=arguments,
                ok=False,
                duplicate_prevented=False,
                reconciliation=INTERRUPTED,
            )
        )
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self._seq_of(step_id),
                type="tool_call",
                name=call.tool,
                status="cancelled",
                input=arguments,
                error="the run was cancelled during the call",
                idempotency_key=key,
                started_at=started,
                finished_at=workflow.now(),
            )
        )

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
            self.progress.duplicates_prevented += 1
            self._event("duplicate.prevented", step_id, {"idempotency_key": key})
        if result.reconciliation:
            self._event("tool.reconciled", step_id, {"key": key, "verdict": result.reconciliation})
        if call.side_effect and not result.unknown_outcome:
            self.progress.side_effects.append(
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

    def _tool_message(self, call_id: str, content: object) -> None:
        self.progress.pending_messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content, default=str)}
        )

    # ------------------------------------------------------------------ checks

    def _tools_used(self) -> list[str]:
        """Tools that ran: the checks each declares on the answer apply too."""
        steps = self.progress.steps
        return sorted({s.name for s in steps if s.type == "tool_call" and s.status == "completed"})

    def _checks_for_reply(self) -> dict[str, Any]:
        """What a model call carries so that, should its reply be a final answer, it returns
        the checks' verdict: the checks when they are computation only (no judge)."""
        if self.spec.verify.judge is not None:
            return {}
        return {"checks": self.spec.verify, "tools_used": self._tools_used()}

    async def _verify_step(self, answer: str, checked: VerifyResult | None) -> VerifyResult:
        """The answer's checks: the verdict the model call returned with the answer (its
        activity ran them), or a verify activity's."""
        step_id = self._new_step("verify", "checks")
        self._set_status(RunStatus.VERIFYING, step_id)
        started = workflow.now()
        check = VerifyInput(
            run_id=self.run_id,
            step_id=step_id,
            answer=answer,
            spec=self.spec.verify,
            tools_used=self._tools_used(),
        )
        timeout = timedelta(seconds=60)
        retry = policies.retry_policy(self.spec, self.spec.timeouts.max_attempts)
        summary = f"verify the answer ({len(answer):,} characters)"
        verdict: VerifyResult
        if checked is not None:
            verdict = checked
        elif self.spec.verify.judge is None:
            # Checks that are computation only (no judge, no I/O) run as a local activity,
            # inside the workflow task that asks for them: no task to dispatch and no task to
            # take the verdict, for the same record in history (a marker).
            verdict = await workflow.execute_local_activity(
                names.ACTIVITY_VERIFY_CHECK,
                check,
                result_type=VerifyResult,
                start_to_close_timeout=timeout,
                retry_policy=retry,
                summary=summary,
            )
        else:
            verdict = await workflow.execute_activity(
                names.ACTIVITY_VERIFY_CHECK,
                check,
                result_type=VerifyResult,
                start_to_close_timeout=timeout,
                retry_policy=retry,
                summary=summary,
            )
        self.progress.verification = verdict
        self.progress.spend(
            verdict.usage.input_tokens, verdict.usage.output_tokens, verdict.cost_usd
        )
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.progress.seq,
                type="verify",
                name="checks",
                status="passed" if verdict.passed else "failed",
                output=verdict.model_dump(mode="json"),
                tokens_in=verdict.usage.input_tokens,
                tokens_out=verdict.usage.output_tokens,
                cost_usd=verdict.cost_usd,
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        return verdict

    async def _checkpoint_step(self, patch: JsonDict) -> None:
        before, self.progress.checkpoint = (
            self.progress.checkpoint,
            {**self.progress.checkpoint, **patch},
        )
        step_id = self._new_step("checkpoint", "merge")
        try:
            await workflow.execute_activity_method(
                MirrorActivities.save_checkpoint,
                CheckpointInput(
                    run_id=self.run_id,
                    step_id=step_id,
                    checkpoint=self.progress.checkpoint,
                    fence=workflow.info().get_current_history_length(),
                ),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=MIRROR_RETRY,
                summary="checkpoint save",
            )
        except ApplicationError as err:
            if payload_limits.is_too_large(err):
                self.progress.checkpoint = before  # the last one that fit, as the mirror holds it
            raise
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self.progress.seq,
                type="checkpoint",
                name="merge",
                status="completed",
                input=patch,
                finished_at=workflow.now(),
            )
        )
