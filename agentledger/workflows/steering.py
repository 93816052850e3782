"""Steering: a person's message to a run in flight (`agentledger say`), taken between steps.

A component of AgentRunWorkflow, which keeps the signal handler. A message arrives as a
signal, so the server keeps it while no worker runs, as it keeps a decision. The run takes
every message waiting right before its next model call (never inside a tool call, never
between a reply's tool calls, whose results the model must see first): each becomes a user
message of the conversation. A run whose spec says `on_message: interrupt` does not wait for
the model call in flight: the call is cancelled, recorded as an interrupted step (a response
that had already arrived stays in the model journal, where the receipt counts it once, as
unaccepted), and the run calls the model again with the message. A message that comes as the
model gives its final answer is taken too: the run replans instead of finishing past it.

A session of generation 6 takes a message said while its turn is in flight as its
double-texting policy says (the message's own, within its tenant's policy, else the spec's
`double_texting`): `reject` refuses it (recorded, never taken), `enqueue` keeps it for the
next turn, `interrupt` ends the turn at its next step boundary and `rollback` at once (a
model call in flight is cancelled), each message then starting the next turn
(agentledger.workflows.sessions closes the turn cut short); with none, the turn in flight
takes it.

Only runs that receive a message take any of these paths, so histories recorded before
steering existed replay unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from agentledger.workflows.changes import Changes
from agentledger.workflows.recording import RunContext
from agentledger.workflows.steps import Step

with workflow.unsafe.imports_passed_through():
    from agentledger.core import bounds, errors, fairness
    from agentledger.core import constants as names
    from agentledger.core.events import EventType
    from agentledger.core.results import RunMessage
    from agentledger.core.states import StepStatus, is_terminal
    from agentledger.core.wire import MirrorBatch, ModelCallInput, ModelCallResult, SayInput
    from agentledger.workflows import policies

T = TypeVar("T")


class Interrupted(Exception):
    """The model call in flight was cancelled for a message: the run calls the model again."""


class Steering:
    """People's messages to the run, and the model call they may interrupt."""

    def __init__(self, run: RunContext, changes: Changes) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        self.charge = run.charge
        # A session's messages follow its double-texting policy (generation 6).
        self.double_texting = run.double_texting and self.spec.session is not None
        self.changes = changes

    def model_input(self, step_id: str, mirror: MirrorBatch | None, **call: Any) -> ModelCallInput:
        """The input of one of the run's model calls: the step and the mirror batch it
        carries, within the run's timeouts, with what this call asks (`call`)."""
        timeouts = self.spec.timeouts
        return ModelCallInput(
            run_id=self.run_id,
            step_id=step_id,
            seq=self.progress.seq,
            heartbeat_seconds=timeouts.heartbeat_seconds,
            timeout_seconds=timeouts.model_seconds,
            mirror=mirror,
            charge=self.charge,
            forgotten=self.progress.forgotten,
            events_before=self.progress.event_seq,
            **call,
        )

    def model_call(
        self, input: ModelCallInput, attempts: int, summary: str
    ) -> workflow.ActivityHandle[ModelCallResult]:
        """`model.complete` (called by name: the CLI imports this workflow and no model SDK),
        with its timeouts and retries: the one way a run calls its model, a message can
        interrupt. On the run's own queue, where the worker that schedules it starts it at
        once if it has a slot (no dispatch through the server's matching), unless the run's
        tenant has a model-call rate: then on the model queue, where the server holds the
        tenant to it. Runs of generation 5 and before send every call there."""
        timeouts = self.spec.timeouts
        queue = workflow.info().task_queue
        if self.changes.generation_6 and not self.progress.model_calls_rated:
            input = input.model_copy(update={"fast_path_tenant": self.spec.tenant})
        else:
            queue = fairness.model_task_queue(queue)
        return workflow.start_activity(
            names.ACTIVITY_MODEL_COMPLETE,
            input,
            result_type=ModelCallResult,
            task_queue=queue,
            start_to_close_timeout=timedelta(seconds=timeouts.model_seconds),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_seconds),
            retry_policy=policies.retry_policy(self.spec, attempts),
            summary=summary,
        )

    async def model_reply(
        self,
        step: Step,
        input_of: Callable[[MirrorBatch | None], ModelCallInput],
        attempts: int,
        summary: str,
        *,
        interruptible_as: str | None = None,
    ) -> ModelCallResult:
        """The reply of the step's model call (`input_of(batch)` is its input, carrying the
        run's pending mirror batch). A call its run's own queue refused because the tenant
        has a model-call rate now is made again on the model queue, and so is every later
        call of the run. With `interruptible_as` (the step's name), a message may interrupt
        it (`reply_or_message`)."""
        while True:
            call = await step.start(
                lambda batch: self.model_call(input_of(batch), attempts, summary)
            )
            try:
                if interruptible_as is None:
                    return await step.outcome(call)
                return await step.outcome(self.reply_or_message(call, step, interruptible_as))
            except ActivityError as err:
                rated = errors.error_kind(err) == errors.MODEL_CALLS_RATED
                if is_cancelled_exception(err) or not rated:
                    raise
                self.progress.model_calls_rated = True
                self.recorder.event(
                    EventType.MODEL_RATE_LIMITED, step.id, {"tenant": self.spec.tenant}
                )

    def say(self, input: SayInput) -> None:
        """A signal cannot be refused: a message that does not fit is recorded and ignored."""
        if any(m.message_id == input.message_id for m in self.progress.messages):
            return  # the same message delivered again
        found = bounds.problems(input)
        if found or is_terminal(self.progress.status):
            reason = "; ".join(found) or f"the run had ended ({self.progress.status.value})"
            self.recorder.event(
                EventType.MESSAGE_IGNORED,
                data={
                    "message_id": input.message_id,
                    "by": bounds.recorded(input.by),
                    "reason": reason,
                },
            )
            return
        turn, policy = self.turn_in_flight(), None
        if self.double_texting:
            policy = input.double_texting or self.spec.double_texting
        rejected = None
        if policy == "reject" and turn is not None:
            rejected = (
                f"turn {turn} of the session is in flight and it takes no message meanwhile "
                "(double-texting: reject); say it again once the turn has answered"
            )
        self.progress.messages.append(
            RunMessage(
                message_id=input.message_id,
                text=input.text,
                by=input.by,
                received_at=workflow.now(),
                double_texting=policy,
                turn_arrived=turn if policy is not None else None,
                rejected=rejected,
            )
        )
        data: dict[str, Any] = {
            "message_id": input.message_id,
            "by": input.by,
            "text": bounds.recorded(input.text),
        }
        if policy is not None:
            data.update(double_texting=policy, turn=turn)
        if rejected is not None:
            data["reason"] = rejected
        self.recorder.event(
            EventType.MESSAGE_REJECTED if rejected else EventType.MESSAGE_RECEIVED, data=data
        )

    def turn_in_flight(self) -> int | None:
        """The number of the session's turn in flight (None: idle, or not a session)."""
        turns = self.progress.turns
        if self.spec.session is None or not turns:
            return None
        last = turns[-1]
        return None if last.answered_at is not None or last.ended is not None else last.turn

    def _takeable(self, message: RunMessage) -> bool:
        """Whether the run may take it now: a message its double-texting policy keeps from
        the turn it came in waits for the next."""
        if message.taken_at is not None or message.rejected is not None:
            return False
        return message.turn_arrived is None or message.turn_arrived != self.turn_in_flight()

    def turn_cut(self) -> Literal["interrupted", "rolled_back"] | None:
        """How a message that came during the turn in flight cuts it short (rollback before
        interrupt), if one does."""
        turn = self.turn_in_flight()
        if turn is None:
            return None
        asked = {
            m.double_texting
            for m in self.progress.messages
            if m.taken_at is None and m.rejected is None and m.turn_arrived == turn
        }
        if "rollback" in asked:
            return "rolled_back"
        return "interrupted" if "interrupt" in asked else None

    def messages_waiting(self) -> bool:
        return any(self._takeable(m) for m in self.progress.messages)

    def take_messages(self) -> list[RunMessage]:
        """Every message waiting becomes a user message the next model call reads; returns
        those taken."""
        if not self.messages_waiting():
            return []
        now = workflow.now()
        taken: list[RunMessage] = []
        for i, message in enumerate(self.progress.messages):
            if not self._takeable(message):
                continue
            taken.append(message)
            self.progress.pending_messages.append(
                {"role": "user", "content": f"Message from {message.by}: {message.text}"}
            )
            self.progress.messages[i] = message.model_copy(
                update={"taken_at": now, "taken_before_step": self.progress.seq + 1}
            )
            self.recorder.event(
                EventType.MESSAGE_TAKEN,
                data={"message_id": message.message_id, "before_step": self.progress.seq + 1},
            )
        return taken

    async def reply_or_message(
        self,
        call: workflow.ActivityHandle[T],
        step: Step,
        name: str,
    ) -> T:
        """The model call's reply; with `on_message: interrupt`, a message that comes first
        cancels the call (raises Interrupted once the step is recorded as interrupted), as a
        message that rolls a session's turn back does."""
        interrupting = self.spec.on_message == "interrupt"
        if not interrupting and not self.double_texting:
            return await call

        def cancels() -> bool:
            return (interrupting and self.messages_waiting()) or self.turn_cut() == "rolled_back"

        message = asyncio.ensure_future(workflow.wait_condition(cancels))
        try:
            await workflow.wait([call, message], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()  # the run is cancelled: the call goes with it, as when awaited alone
            raise
        finally:
            if not message.done():
                message.cancel()
        if call.done():
            return call.result()
        call.cancel()
        try:
            return await call  # it answered in the same activation as the cancel: use it
        except ActivityError as err:
            if not is_cancelled_exception(err):
                raise
        except asyncio.CancelledError:
            pass
        waiting = [
            m.message_id
            for m in self.progress.messages
            if m.taken_at is None and m.rejected is None
        ]
        self.progress.messages = [
            m.model_copy(update={"interrupted_step": step.id})
            if m.message_id in waiting and m.interrupted_step is None
            else m
            for m in self.progress.messages
        ]
        step.end(
            StepStatus.INTERRUPTED,
            name=name,
            error="cancelled for a message: the run replans with it",
        )
        self.recorder.event(EventType.MODEL_INTERRUPTED, step.id, {"messages": waiting})
        raise Interrupted(step.id)
