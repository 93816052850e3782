"""AgentRun: one agent run as one Temporal workflow.

The loop is: decide (model call), act (tool calls, some behind a human approval), verify,
finish with a receipt. The workflow class holds the loop, the model steps and the thin
signal, update and query handlers Temporal needs on it; the rest is done by components, each
built with the run's context (its input, its `RunProgress` and its `Recorder`): the record
(agentledger.workflows.recording), tool steps (tool_steps.py), approvals (approvals.py),
answer checks (answer_checks.py), pause and resume (run_messages.py), steering
(steering.py), sessions (sessions.py) and sub-agents (subagents.py). The run's state is
declared once, in `RunProgress` (agentledger.workflows.run_state derives the rest from it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    is_cancelled_exception,
)

from agentledger.workflows import run_endings, run_state
from agentledger.workflows.answer_checks import AnswerChecks
from agentledger.workflows.approvals import Approvals
from agentledger.workflows.changes import Changes
from agentledger.workflows.forks import seed_fork
from agentledger.workflows.recording import Recorder, RunContext
from agentledger.workflows.run_messages import RunControls
from agentledger.workflows.run_state import RunEnded
from agentledger.workflows.run_stream import RunStream
from agentledger.workflows.sessions import Sessions, TurnCut
from agentledger.workflows.steering import Interrupted, Steering
from agentledger.workflows.subagents import Subagents
from agentledger.workflows.tool_steps import ToolSteps, tool_message

with workflow.unsafe.imports_passed_through():
    # The model's and the judge's activities are called by name: their modules load the
    # model SDK, which a client importing this workflow (the CLI) has no use for.
    from agentledger.core import constants as names
    from agentledger.core import errors, payload_limits, run_summaries, search_attributes
    from agentledger.core._state import RunInput, RunProgress
    from agentledger.core.admission_models import AdmitInput, ReleaseInput
    from agentledger.core.errors import PERMISSION_DENIED
    from agentledger.core.events import EventType
    from agentledger.core.messages import Message, RunMessages
    from agentledger.core.results import (
        ControlResult,
        DecisionResult,
        PendingApproval,
        RunResult,
        RunState,
    )
    from agentledger.core.spec import JsonDict, RiskLevel
    from agentledger.core.states import RunStatus, StepStatus
    from agentledger.core.wire import (
        ApproveInput,
        ChildApprovalNotice,
        ControlInput,
        MirrorBatch,
        ModelCallInput,
        ModelCallResult,
        ProposedToolCall,
        RejectInput,
    )
    from agentledger.workflows import policies

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


@workflow.defn(name=names.WORKFLOW_NAME)
class AgentRunWorkflow:
    @workflow.init
    def __init__(self, spec: RunInput) -> None:
        self.changes = Changes(spec.workflow_generation)
        self.spec = spec
        self.run_id = workflow.info().workflow_id
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
                model_calls_rated=spec.model_calls_rated,
                pending_messages=[
                    {"role": "system", "content": spec.instructions or SYSTEM_PROMPT},
                    {"role": "user", "content": spec.task},
                ],
            )
        self.stream = RunStream(self.progress.stream_state)
        self.progress.stream_state = None  # the stream holds it now; set again at the carry
        # Only runs started with the search attributes keep them current (Recorder).
        indexed = workflow.info().typed_search_attributes.get(search_attributes.STATUS)
        self.recorder = Recorder(spec, self.run_id, self.progress, self.stream.publish, indexed)
        # Generation 6: charged to its tenant, credential and agent, under their budgets; a
        # session's messages follow its double-texting policy.
        sixth = self.changes.generation_6
        self.context = run = RunContext(
            spec,
            self.run_id,
            self.progress,
            self.recorder,
            charge=spec.charge() if sixth else None,
            double_texting=sixth,
        )
        self.subagents = Subagents(run)
        self.controls = RunControls(run, self.subagents.forward_control)
        self.approvals = Approvals(run, self.subagents.tell_parent, self.changes)
        self.steering = Steering(run, self.changes)
        self.sessions = Sessions(run, self.steering, self._continue_as_new)
        self.checks = AnswerChecks(run)
        self.tools = ToolSteps(run, self.approvals, self.subagents, self.controls)
        # Each intent's kept form, by its message: the component that applies it.
        self._kept: dict[Message, Callable[[Any], None]] = {
            RunMessages.PAUSE: self.controls.pause_signal,
            RunMessages.RESUME: self.controls.resume_signal,
            RunMessages.APPROVE: self.approvals.decide_by_signal,
            RunMessages.REJECT: self.approvals.decide_by_signal,
            RunMessages.END_SESSION: self.sessions.end_signal,
            RunMessages.SAY: self.steering.say,
        }
        if spec.carry is None:
            # Here, not in `run`: a signal delivered with the start runs its handler before
            # `run`, and the story must still begin with the start.
            started: JsonDict = {"tenant": spec.tenant, "user": spec.user}
            if spec.requester is not None:  # who asked, as their credential proved it
                started["requester"] = spec.requester.model_dump(mode="json")
            self.recorder.event(EventType.RUN_STARTED, data=started)

    # ------------------------------------------------------------------ handlers

    @workflow.query(name=names.QUERY_STATE)
    def state(self) -> RunState:
        return run_state.state_view(self.run_id, self.spec, self.progress, self.recorder.priority())

    @workflow.query(name=names.QUERY_PENDING_APPROVAL)
    def get_pending_approval(self) -> PendingApproval | None:
        return self.progress.pending_approval

    @workflow.signal(name=names.SIGNAL_RUN_ADMIT)
    def admit_signal(self, input: AdmitInput) -> None:
        self.controls.admit(input)

    # One update per intent (agentledger.core.messages, `RunMessages`): its validator
    # refuses at once what does not fit. Each intent's kept form, a signal sent while no
    # worker answered, comes in through `kept`, below.

    @workflow.update(name=RunMessages.PAUSE.update_name)
    def pause(self, input: ControlInput) -> ControlResult:
        return self.controls.pause(input)

    @pause.validator
    def _validate_pause(self, input: ControlInput) -> None:
        self.controls.validate_pause(input)

    @workflow.update(name=RunMessages.RESUME.update_name)
    def resume(self, input: ControlInput) -> ControlResult:
        return self.controls.resume(input)

    @resume.validator
    def _validate_resume(self, input: ControlInput) -> None:
        self.controls.validate_resume(input)

    @workflow.update(name=RunMessages.APPROVE.update_name)
    async def approve(self, input: ApproveInput) -> DecisionResult:
        return await self.approvals.decide_by_update(input)

    @approve.validator
    def _validate_approve(self, input: ApproveInput) -> None:
        self.approvals.validate(input)

    @workflow.update(name=RunMessages.REJECT.update_name)
    async def reject(self, input: RejectInput) -> DecisionResult:
        return await self.approvals.decide_by_update(input)

    @reject.validator
    def _validate_reject(self, input: RejectInput) -> None:
        self.approvals.validate(input)

    @workflow.update(name=RunMessages.END_SESSION.update_name)
    def end_session(self, input: ControlInput) -> ControlResult:
        return self.sessions.end(input)

    @end_session.validator
    def _validate_end_session(self, input: ControlInput) -> None:
        self.sessions.validate_end(input)

    @workflow.signal(dynamic=True)
    def kept(self, name: str, args: Sequence[RawValue]) -> None:
        """An intent's kept form: sent while no worker answered (or while the run took no
        more updates), held by the server, applied here with the update's checks; one that
        does not fit is recorded and ignored, since a signal cannot be refused."""
        message = RunMessages.TABLE.kept(name)
        if message is None or len(args) != 1:
            workflow.logger.warning("run %s ignored an unknown signal %r", self.run_id, name)
            return
        try:
            input = workflow.payload_converter().from_payload(args[0].payload, message.kept_as)
        except Exception:  # as the SDK drops a signal whose input it cannot read
            workflow.logger.exception("run %s dropped a %r it could not read", self.run_id, name)
            return
        self._kept[message](input)

    @workflow.signal(name=names.SIGNAL_CHILD_APPROVAL)
    async def child_approval_signal(self, notice: ChildApprovalNotice) -> None:
        await self.subagents.child_approval(notice)

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
        self.recorder.event(
            EventType.RUN_CONTINUED_AS_NEW, data={"generation": self.progress.generation + 1}
        )
        await self.recorder.flush()
        self.stream.detach()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self.recorder.mirror_written()
        # Handlers that ran while the run waited emitted events: they go too.
        while self.recorder.has_unsent():
            await self.recorder.flush()
            await workflow.wait_condition(workflow.all_handlers_finished)
            await self.recorder.mirror_written()
        if self.spec.session is not None:
            self.sessions.leave_in_mirror()
        self.progress.stream_state = self.stream.carry()
        carry = run_state.carry(self.progress)
        workflow.continue_as_new(self.spec.model_copy(update={"carry": carry}))

    @workflow.run
    async def run(self, spec: RunInput) -> RunResult:
        cancelled = False
        try:
            await self._wait_for_slot()
            if spec.fork is not None and spec.carry is None:
                # Only runs started by `agentledger fork` carry `fork`: no recorded history
                # takes this path, so it needs no patch.
                for call in await seed_fork(self.context, spec.fork):
                    await self.controls.step_boundary()
                    await self.tools.step(call)
            await self._agent_loop()
        except RunEnded as end:
            self.recorder.finish(end.status, error=end.reason)
        except (asyncio.CancelledError, ActivityError) as err:
            if not is_cancelled_exception(err):
                assert isinstance(err, ActivityError)
                if errors.error_kind(err) == errors.BUDGET_EXHAUSTED:
                    # Refused at a model call (never inside a tool's): what it did stands.
                    self.recorder.finish(
                        RunStatus.BUDGET_EXHAUSTED,
                        answer=self.progress.answer,  # a session's last turn's, if any
                        error=errors.cause(err),
                    )
                else:
                    self.recorder.finish(
                        RunStatus.FAILED, error=f"{err.activity_type} failed: {errors.cause(err)}"
                    )
            else:
                self.recorder.finish(RunStatus.CANCELLED, error="cancelled on request")
                cancelled = True
        except ApplicationError as err:
            # An input Temporal would refuse (agentledger.core.payload_limits): end the run with the
            # reason rather than fail the workflow task, which Temporal retries for ever.
            if not payload_limits.is_too_large(err):
                raise
            self.recorder.fail_unsent_step(err.message)
            self.recorder.finish(RunStatus.FAILED, error=err.message)
        # The run has ended: a cancel that comes now must not cost it its receipt.
        await shielded(self.recorder.record_receipt())
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
        # Temporal ends the run as agentledger does.
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
                self.recorder.event(EventType.RUN_ADMITTED)
            return
        self.recorder.event(EventType.RUN_QUEUED, data={"admission": self.spec.admission})
        await self.recorder.flush()
        await workflow.wait_condition(lambda: self.progress.admitted)
        self.recorder.event(EventType.RUN_ADMITTED)

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
        # A session (agentledger.workflows.sessions): a turn per message until it is idle.
        if self.progress.status != RunStatus.WAITING_FOR_MESSAGE:
            # The first turn, or the one a continuation of the session was working on.
            if not self.progress.turns:
                self.sessions.open_turn()
            await self._turn()
        while await self.sessions.next_message():
            self.sessions.open_turn()
            await self._turn()
        self.recorder.finish(RunStatus.COMPLETED, answer=self.progress.answer)

    async def _turn(self) -> None:
        """A session's turn, to its answer; a turn a message cuts short (double-texting)
        ends where it was, and the message starts the next."""
        while True:
            try:
                await self._work()
                return
            except TurnCut as cut:
                self.sessions.cut(cut.how)
                self.sessions.open_turn()

    def _at_boundary(self, unrun: list[ProposedToolCall]) -> None:
        """Between steps: end a session's turn a message cuts short (`unrun`: the calls of
        the reply in hand not run yet, which the model hears were not)."""
        how = self.steering.turn_cut()
        if how is None:
            return
        for call in unrun:
            tool_message(
                self.progress, call.call_id, {"error": "not run: the turn ended for a message"}
            )
        raise TurnCut(how)

    async def _work(self) -> None:
        """Work on the task (a session: the turn) until its answer passes its checks."""
        while self.sessions.calls_left():
            await self.controls.step_boundary()
            self._at_boundary([])
            await self._continue_as_new_if_long()
            # Steering: what people said since the last call (a session's turn answers it).
            self.sessions.took(self.steering.take_messages())
            try:
                reply = await self._model_step()
            except Interrupted:
                continue
            self.progress.model_calls += 1
            await self.approvals.enforce_budget()
            if self._needs_repair(reply):
                continue
            if reply.tool_calls:
                for i, call in enumerate(reply.tool_calls):
                    await self.controls.step_boundary()
                    self._at_boundary(reply.tool_calls[i:])
                    await self.tools.step(call)
                continue
            if self._replan_for_messages():  # said as the model answered
                continue
            answer = reply.content or ""
            verdict = await self.checks.verify(answer, reply.verdict)
            if verdict.judge_model is not None:
                await self.approvals.enforce_budget()
            if verdict.passed and self._replan_for_messages():  # said as a judge checked
                continue
            if verdict.passed and self.spec.session is not None:
                await self.sessions.turn_answered(answer)
                return
            if verdict.passed:
                self.recorder.finish(RunStatus.COMPLETED, answer=answer)
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
                    await self.controls.pause_for_admin(
                        f"model provider refused: {errors.cause(err)}"
                    )
                    continue
                if last or kind in errors.FINAL_ERRORS:
                    raise
                self.recorder.event(
                    EventType.MODEL_FALLBACK,
                    data={"from": models[index], "to": models[index + 1], "reason": kind},
                )
                self.progress.model_choice = index + 1

    async def _call_model(
        self, model: str | None, attempts: int, provider: str | None = None
    ) -> ModelCallResult:
        async with self.recorder.step(
            "model_call", model or self.progress.model_used or "model"
        ) as step:
            try:
                reply = await self.steering.model_reply(
                    step,
                    lambda mirror: self._model_input(step.id, model, provider, mirror),
                    attempts,
                    run_summaries.model_summary(
                        model or self.progress.model_used or "(the worker's default)",
                        self.progress.tokens_in + self.progress.tokens_out,
                    ),
                    interruptible_as=model or "model",
                )
            except ActivityError as err:
                if not is_cancelled_exception(err):
                    step.end(
                        StepStatus.FAILED,
                        name=model or "model",
                        error=f"{errors.error_kind(err)}: {errors.cause(err)}",
                        attempt=attempts,
                    )
                raise
            # A watcher's pending poll completes in this task: an update's completion.
            self.stream.publish_rest_of_reply(step.id, reply)  # before its step.completed event
            self.progress.stored_messages += len(self.progress.pending_messages)
            self.progress.pending_messages = []
            self.progress.model_used = reply.model
            self.progress.spend(reply.usage.input_tokens, reply.usage.output_tokens, reply.cost_usd)
            if not reply.priced and reply.model not in self.progress.unpriced_models:
                self.progress.unpriced_models.append(reply.model)
            if reply.wrapped_up:
                self.recorder.event(EventType.BUDGET_WRAP_UP, step.id, {"model": reply.model})
            self.progress.pending_messages.append(reply.assistant_message)
            step.end(
                StepStatus.COMPLETED,
                name=reply.model,
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
            )
            return reply

    def _model_input(
        self, step_id: str, model: str | None, provider: str | None, mirror: MirrorBatch | None
    ) -> ModelCallInput:
        """What a decision's model call reads: the conversation's new messages, the tools
        and sub-agents offered, and the checks its reply may run."""
        ruled = self.spec.approval.ruled_tools()
        return self.steering.model_input(
            step_id,
            mirror,
            model=model,
            new_messages=self.progress.pending_messages,
            first_index=self.progress.stored_messages,
            allowed_tools=self.spec.allowed_tools,
            temperature=self.spec.model.temperature,
            max_tokens=self.spec.model.max_tokens,
            provider=provider,
            cut=self.sessions.conversation_cut(),
            # A call some rule may stop for approval carries its schema too (edits are
            # checked against it); a rule on every tool: every call does.
            approval_at=RiskLevel.LOW if "*" in ruled else self.spec.approval.require_at_or_above,
            approval_always=[*self.spec.approval.always, *sorted(ruled - {"*"})],
            **self.checks.for_reply(),
            **self.subagents.tools(),
        )

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
            tool_message(
                self.progress, call.call_id, {"error": f"not run: {call.error or problem}"}
            )
        self.progress.pending_messages.append(
            {"role": "user", "content": policies.REPAIR_PROMPT.format(problem=problem)}
        )
        self.recorder.event(EventType.MODEL_REPAIR_REQUESTED, data={"problem": problem})
        return True

    def _replan_for_messages(self) -> bool:
        """A message came as the model gave its final answer: the run replans with it, if it
        has a model call left (else it finishes, and its receipt shows the message as not
        taken)."""
        return self.steering.messages_waiting() and self.sessions.calls_left()
