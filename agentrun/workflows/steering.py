"""Steering: a person's message to a run in flight (`agentrun say`), taken between steps.

Mixed into AgentRunWorkflow. A message arrives as a signal, so the server keeps it while no
worker runs, as it keeps a decision. The run takes every message waiting right before its
next model call (never inside a tool call, never between a reply's tool calls, whose results
the model must see first): each becomes a user message of the conversation. A run whose spec
says `on_message: interrupt` does not wait for the model call in flight: the call is
cancelled, recorded as an interrupted step (a response that had already arrived stays in
the model journal, where the receipt counts it once, as unaccepted), and the run calls the
model again with the message. A message that comes as the model gives its final answer is
taken too: the run replans instead of finishing past it.

Only runs that receive a message take any of these paths, so histories recorded before
steering existed replay unchanged.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from agentrun.workflows.recording import Recording

with workflow.unsafe.imports_passed_through():
    from agentrun.core import bounds, fairness
    from agentrun.core import constants as names
    from agentrun.core._wire import ModelCallInput, ModelCallResult, SayInput, StepRecord
    from agentrun.core.results import RunMessage
    from agentrun.core.states import is_terminal
    from agentrun.workflows import policies

T = TypeVar("T")


class Interrupted(Exception):
    """The model call in flight was cancelled for a message: the run calls the model again."""


class Steering(Recording):
    def _model_call(
        self, input: ModelCallInput, attempts: int, summary: str
    ) -> workflow.ActivityHandle[ModelCallResult]:
        """`model.complete` (called by name: the CLI imports this workflow and no model SDK) on
        the run's model queue, with its timeouts and retries: the one way a run calls its model,
        a message can interrupt."""
        timeouts = self.spec.timeouts
        return workflow.start_activity(
            names.ACTIVITY_MODEL_COMPLETE,
            input,
            result_type=ModelCallResult,
            task_queue=fairness.model_task_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(seconds=timeouts.model_seconds),
            heartbeat_timeout=timedelta(seconds=timeouts.heartbeat_seconds),
            retry_policy=policies.retry_policy(self.spec, attempts),
            summary=summary,
        )

    @workflow.signal(name=names.SIGNAL_SAY)
    def say_signal(self, input: SayInput) -> None:
        """A signal cannot be refused: a message that does not fit is recorded and ignored."""
        if any(m.message_id == input.message_id for m in self.progress.messages):
            return  # the same message delivered again
        found = bounds.problems(input)
        if found or is_terminal(self.progress.status):
            reason = "; ".join(found) or f"the run had ended ({self.progress.status.value})"
            self._event(
                "message.ignored",
                data={
                    "message_id": input.message_id,
                    "by": bounds.recorded(input.by),
                    "reason": reason,
                },
            )
            return
        self.progress.messages.append(
            RunMessage(
                message_id=input.message_id,
                text=input.text,
                by=input.by,
                received_at=workflow.now(),
            )
        )
        self._event(
            "message.received",
            data={
                "message_id": input.message_id,
                "by": input.by,
                "text": bounds.recorded(input.text),
            },
        )

    def _messages_waiting(self) -> bool:
        return any(m.taken_at is None for m in self.progress.messages)

    def _replan_for_messages(self) -> bool:
        """A message came as the model gave its final answer: the run replans with it,
        if it has a model call left (else it finishes, and its receipt shows the message
        as not taken)."""
        return self._messages_waiting() and self._calls_left()

    def _calls_left(self) -> bool:
        """Whether the run may call the model again (a session's turn: Sessions)."""
        return self.progress.model_calls < self.spec.max_steps

    def _take_messages(self) -> None:
        """Every message waiting becomes a user message the next model call reads."""
        if not self._messages_waiting():
            return
        now = workflow.now()
        taken: list[RunMessage] = []
        for i, message in enumerate(self.progress.messages):
            if message.taken_at is not None:
                continue
            taken.append(message)
            self.progress.pending_messages.append(
                {"role": "user", "content": f"Message from {message.by}: {message.text}"}
            )
            self.progress.messages[i] = message.model_copy(
                update={"taken_at": now, "taken_before_step": self.progress.seq + 1}
            )
            self._event(
                "message.taken",
                data={"message_id": message.message_id, "before_step": self.progress.seq + 1},
            )
        self._turn_took([m.message_id for m in taken], [m.text for m in taken])

    def _turn_took(self, message_ids: list[str], texts: list[str]) -> None:
        """A session's hook (agentrun/workflows/sessions.py): the turn answers them."""

    async def _model_reply_or_message(
        self,
        call: workflow.ActivityHandle[T],
        step_id: str,
        name: str,
        started: datetime,
    ) -> T:
        """The model call's reply; with `on_message: interrupt`, a message that comes first
        cancels the call (raises Interrupted once the step is recorded as interrupted)."""
        if self.spec.on_message != "interrupt":
            return await call
        message = asyncio.ensure_future(workflow.wait_condition(self._messages_waiting))
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
        waiting = [m.message_id for m in self.progress.messages if m.taken_at is None]
        self.progress.messages = [
            m.model_copy(update={"interrupted_step": step_id})
            if m.message_id in waiting and m.interrupted_step is None
            else m
            for m in self.progress.messages
        ]
        self._complete_step(
            StepRecord(
                step_id=step_id,
                seq=self._seq_of(step_id),
                type="model_call",
                name=name,
                status="interrupted",
                error="cancelled for a message: the run replans with it",
                started_at=started,
                finished_at=workflow.now(),
            )
        )
        self._event("model.interrupted", step_id, {"messages": waiting})
        raise Interrupted(step_id)
