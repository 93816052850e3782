"""Sub-agents: a run delegates a task to another agent, as a child run.

A component of AgentRunWorkflow, which keeps the signal handler. A spec whose `subagents`
names agents offers each to the model as a tool `agent__NAME` taking a task; a call starts a
child run of that agent's spec (its own receipt, naming its parent; the parent's receipt
lists it), waits for it durably (a child workflow: no worker is held, and a worker's death
loses nothing), and hands the model the child's answer, or, when the child did not complete,
its failure as a tool error. The child's budget is what is left of the parent's, and it
fails rather than asks for more, so the parent's budget covers every child; the child's
spend is added to the parent's. Cancelling the parent cancels the child it waits for (a
child's parent-close policy cancels the rest); pausing or resuming it signals the child it
waits for the same (which passes it on to its own). A child that waits for an approval
signals its parent (which passes it on to its own), so the parent's state and stream show
the approval and the child's run id. Depth and the number of children are limited
(`subagent_limits`).

Only specs with sub-agents take these paths, so older histories replay unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError

from agentledger.workflows import run_endings, run_starts
from agentledger.workflows.recording import RunContext

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from agentledger.core import constants as names
    from agentledger.core._state import RunInput
    from agentledger.core.events import EventType
    from agentledger.core.keys import id_part
    from agentledger.core.messages import Message, RunMessages
    from agentledger.core.results import ChildApproval, PendingApproval, RunResult
    from agentledger.core.spec import JsonDict
    from agentledger.core.states import RunStatus, StepStatus
    from agentledger.core.wire import (
        ChildApprovalNotice,
        ControlInput,
        ProposedToolCall,
    )


def subagent_run_id(parent_id: str, step_id: str) -> str:
    """`run-~sub.<parent>~<step>`: under the engine's `run-~` ids
    (agentledger.workflows.child_runs),
    one per step of its parent, so a replayed parent finds the same child."""
    return f"{names.RUN_ID_PREFIX}~sub.{id_part(parent_id)}~{id_part(step_id)}"


class Subagents:
    """The run's sub-agent runs: the one it waits for, and the signals between them."""

    def __init__(self, run: RunContext) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        # The sub-agent run this run waits for, if any, and the pauses and resumes on their
        # way to it: both within a step, so a continuation does without them.
        self.running_child: str | None = None
        self.forwards: set[asyncio.Future[None]] = set()

    def tools(self) -> dict[str, Any]:
        """What a model call carries so the model is offered the run's sub-agents."""
        if not self.spec.subagents:
            return {}
        return {"subagents": sorted(self.spec.subagents)}

    def is_call(self, call: ProposedToolCall) -> bool:
        prefix = names.SUBAGENT_TOOL_PREFIX
        return bool(self.spec.subagents) and call.tool.removeprefix(prefix) in self.spec.subagents

    def _child_spec(self, name: str, task: str) -> RunInput | str:
        """The child's spec, or why no child may start."""
        limits = self.spec.subagent_limits
        if len(self.progress.children) >= limits.max_calls:
            return f"this run has started its limit of {limits.max_calls} sub-agent runs"
        budget: JsonDict = {}
        spent_tokens = self.progress.tokens_in + self.progress.tokens_out
        if self.progress.budget.max_tokens is not None:
            budget["max_tokens"] = self.progress.budget.max_tokens - spent_tokens
        if self.progress.budget.max_cost_usd is not None:
            budget["max_cost_usd"] = round(
                self.progress.budget.max_cost_usd - self.progress.cost_usd, 6
            )
        if any(left <= 0 for left in budget.values()):
            return "the run's budget is spent: no sub-agent can start"
        fields = self.spec.subagents[name]
        depth = self.spec.subagent_depth + 1
        try:
            spec = self._validated_child(fields, task, budget, depth)
        except ValidationError as err:  # the model wrote the task: it hears what is wrong
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()
            )
            return f"the {name} agent cannot take this task ({problems})"
        return spec

    def _validated_child(
        self, fields: JsonDict, task: str, budget: JsonDict, depth: int
    ) -> RunInput:
        limits = self.spec.subagent_limits
        return RunInput.model_validate(
            {
                **fields,
                "task": task,
                "user": self.spec.user,
                "budget": budget,
                "failures": {**fields.get("failures", {}), "on_budget_exceeded": "fail"},
                "subagent_limits": limits.model_dump(),
                "subagents": fields.get("subagents", {}) if depth < limits.max_depth else {},
                "parent_run_id": self.run_id,
                "subagent_depth": depth,
            }
        )

    async def step(self, call: ProposedToolCall) -> None:
        """Run the sub-agent the call names on its task; the model hears how it ended."""
        name = call.tool.removeprefix(names.SUBAGENT_TOOL_PREFIX)
        task = str((call.arguments or {}).get("task", ""))
        async with self.recorder.step("tool_call", call.tool) as step:
            spec = self._child_spec(name, task)
            child_id = subagent_run_id(self.run_id, step.id)
            step.input = {"task": task, "run_id": child_id}
            if isinstance(spec, str):
                result = RunResult(
                    run_id=child_id, status=RunStatus.FAILED, answer=None, error=spec
                )
            else:
                self.progress.children.append(child_id)
                self.recorder.event(
                    EventType.SUBAGENT_STARTED, step.id, {"agent": name, "run_id": child_id}
                )
                await self.recorder.flush()
                try:
                    result = await self._run_child(spec, child_id)
                finally:  # one child runs at a time: what waited under it is over
                    self.progress.child_approvals.clear()
                self.progress.spend(result.tokens_in, result.tokens_out, result.cost_usd)
            completed = result.status == RunStatus.COMPLETED
            outcome = {"run_id": result.run_id, "status": result.status.value}
            step.end(
                StepStatus.COMPLETED if completed else StepStatus.FAILED,
                output={**outcome, "answer": result.answer},
                error=None if completed else result.error,
                tokens_in=result.tokens_in,
                tokens_out=result.tokens_out,
                cost_usd=result.cost_usd,
            )
        message: JsonDict = (
            {**outcome, "answer": result.answer}
            if completed
            else {
                **outcome,
                "error": f"the {name} agent's run ended {result.status.value}: {result.error}",
            }
        )
        self.progress.pending_messages.append(
            {"role": "tool", "tool_call_id": call.call_id, "content": json.dumps(message)}
        )

    async def _run_child(self, spec: RunInput, child_id: str) -> RunResult:
        """The child's result; a child that was cancelled or terminated reads as failed. A
        cancel of this run goes on to the child (and ends this run)."""
        child = asyncio.ensure_future(self._start_child(spec, child_id))
        try:
            result: RunResult = await asyncio.shield(child)
            return result
        except asyncio.CancelledError:
            # This run is cancelled: so is the child, and this run ends once it has stopped
            # (awaited alone, the child's cancellation would read as a failed tool call).
            if not child.done():
                child.cancel()
            with contextlib.suppress(ChildWorkflowError, asyncio.CancelledError):
                await child
            raise
        except ChildWorkflowError as err:
            return run_endings.child_result(err, child_id)
        finally:
            self.running_child = None

    async def _start_child(self, spec: RunInput, child_id: str) -> RunResult:
        """Start the child under this run's policy (agentledger.workflows.run_starts) and wait
        for its result (what `execute_child_workflow` does, so the same commands); a pause of
        this run that came while it started goes on to it."""
        handle = await run_starts.start_run(
            # The child's model calls go where the parent's go now (a rate set since it began).
            run_starts.within_parent(
                self.spec.model_copy(update={"model_calls_rated": self.progress.model_calls_rated}),
                spec,
            ),
            run_id=child_id,
            summary=f"{spec.agent} for {self.run_id}",
        )
        self.running_child = child_id
        if self.progress.pause_requested:
            self.forward_control(RunMessages.PAUSE, ControlInput(by=self.run_id))
        result: RunResult = await handle
        return result

    def forward_control(self, message: Message, input: ControlInput) -> None:
        """A pause or resume of this run goes on to the sub-agent run it waits for, as a
        signal this workflow sends (durable: no client needs to stay up); that run passes it
        on to its own. Only a run waiting for a child has one to send."""
        if self.running_child is None:
            return
        forwarded = ControlInput(by=input.by, reason=f"via {self.run_id}")
        sent = asyncio.ensure_future(
            self._signal_run(self.running_child, message.kept_signal, forwarded)
        )
        self.forwards.add(sent)
        sent.add_done_callback(self.forwards.discard)

    async def tell_parent(self, approval: PendingApproval | None) -> None:
        if self.spec.subagent_depth == 0 or self.spec.parent_run_id is None:
            return
        notice = ChildApprovalNotice(run_id=self.run_id, approval=approval)
        await self._signal_run(self.spec.parent_run_id, names.SIGNAL_CHILD_APPROVAL, notice)

    async def _signal_run(self, run_id: str, signal: str, arg: Any) -> None:
        try:
            await workflow.get_external_workflow_handle(run_id).signal(signal, arg)
        except FailureError as err:  # that run has ended: there is no one to tell
            workflow.logger.info(
                "run %s could not signal %s to %s: %s", self.run_id, signal, run_id, err
            )

    async def child_approval(self, notice: ChildApprovalNotice) -> None:
        """A sub-agent's run (or one under it) waits for an approval, or no longer does.
        Taken only from the child this run waits for and those under it, while it waits."""
        child = self.running_child
        if child is None or not (
            notice.run_id == child
            or (
                notice.run_id.startswith(f"{names.RUN_ID_PREFIX}~sub.")
                and id_part(child) in notice.run_id
            )
        ):  # not from the child it waits for (or one under it), or that child has ended
            workflow.logger.warning(
                "run %s ignored an approval notice of %r", self.run_id, notice.run_id
            )
            return
        self.progress.child_approvals = [
            a for a in self.progress.child_approvals if a.run_id != notice.run_id
        ]
        if notice.approval is not None:
            self.progress.child_approvals.append(
                ChildApproval(run_id=notice.run_id, approval=notice.approval)
            )
            approval = notice.approval
            self.recorder.event(
                EventType.SUBAGENT_WAITING_FOR_APPROVAL,
                data={
                    "run_id": notice.run_id,
                    "approval_id": approval.approval_id,
                    "kind": approval.kind,
                    "tool": approval.tool,
                    "required_role": approval.required_role,
                },
            )
        else:
            self.recorder.event(EventType.SUBAGENT_APPROVAL_SETTLED, data={"run_id": notice.run_id})
        if self.spec.subagent_depth > 0 and self.spec.parent_run_id is not None:
            await self._signal_run(self.spec.parent_run_id, names.SIGNAL_CHILD_APPROVAL, notice)
