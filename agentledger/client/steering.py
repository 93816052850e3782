"""Steering a run in flight: pause and resume it, say something to it, end a session.

A message (`agentledger say`) goes as a signal, which the server keeps in the run's history
whether or not a worker runs, as a decision is kept; the run takes it at its next model
call (or, with `on_message: interrupt`, cancels the call in flight for it). A message to a
run that has ended, or that the caller may not see, is refused before anything is sent.

Pause, resume and the end of a session (`agentledger end`) go as an update when a worker
answers and the run takes it, else as a signal the server keeps for when one does (the
server confirmed it before the answer says so).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from agentledger.client import handles
from agentledger.client.scope import RunRef, Scope
from agentledger.core import bounds
from agentledger.core._state import RunInput
from agentledger.core.constants import DoubleTexting
from agentledger.core.errors import InvalidRequest, OperationRefused
from agentledger.core.messages import Message, RunMessages
from agentledger.core.results import ControlResult, RunMessage, RunState, SayResult
from agentledger.core.states import is_terminal
from agentledger.core.wire import ControlInput, SayInput
from agentledger.store.tenant_store import TenantStore
from agentledger.temporal.worker_presence import Deadline, NoAnswer, within
from agentledger.workflows import AgentRunWorkflow


class Steering:
    """What the caller tells its runs in flight: another tenant's run reads as missing."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def pause(
        self, run_id: str, *, by: str = "cli", wait: float | None = None
    ) -> ControlResult:
        """Pause at the next step boundary (recorded for later while no worker runs)."""
        return await self._control(run_id, RunMessages.PAUSE, by, wait, paused=True)

    async def resume(
        self, run_id: str, *, by: str = "cli", wait: float | None = None
    ) -> ControlResult:
        """Continue a paused run (recorded for later while no worker runs)."""
        return await self._control(run_id, RunMessages.RESUME, by, wait, paused=False)

    async def _control(
        self, run_id: str, intent: Message, by: str, wait: float | None, *, paused: bool
    ) -> ControlResult:
        input = ControlInput(by=by)
        bounds.check(input, "control")
        deadline = Deadline(self.scope.bound(wait))
        run = await self.scope.running(run_id, deadline)
        return await self._send(run, intent, input, deadline, paused)

    async def say(
        self,
        run_id: str,
        text: str,
        *,
        by: str = "cli",
        message_id: str | None = None,
        double_texting: DoubleTexting | None = None,
        wait: float | None = None,
    ) -> SayResult:
        """Add `text` to the run's conversation as a message from `by`; `message_id` (made when
        not given) makes a second send of the same message change nothing. To a session whose
        turn is in flight, it does what `double_texting` asks (within its tenant's policy),
        else what the session's own policy says; refused (OperationRefused) under `reject`."""
        if not text.strip():
            raise InvalidRequest(
                'say needs a message: `agentledger say RUN "what the agent should know"`'
            )
        message = SayInput(
            message_id=message_id or uuid.uuid4().hex,
            text=text,
            by=by,
            double_texting=double_texting,
        )
        bounds.check(message, "message")
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        mirror = await self.scope.mirror()
        run = await self.scope.running(run_id, deadline)
        if double_texting is not None:
            await self._within_policy(run_id, double_texting, deadline)
        try:
            before: RunState | None = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.state, deadline, 0.3
            )
        except NoAnswer:
            before = None
        if before is not None and is_terminal(before.status):
            raise OperationRefused(
                f"run {run_id} has already ended as {before.status.value}; "
                f"`agentledger receipt {run_id}` shows how"
            )
        await handles.signal_within(run.handle, RunMessages.SAY, message, deadline)
        if before is None:
            return SayResult(
                run_id=run_id,
                message_id=message.message_id,
                status=await handles.last_status(run, mirror),
                delivered="recorded",
                note=handles.recorded("message", run),
            )
        while deadline.left() > 0.1:
            try:
                state: RunState = await handles.ask_within(
                    client, run.handle, AgentRunWorkflow.state, deadline
                )
            except NoAnswer:
                break
            said = next((m for m in state.messages if m.message_id == message.message_id), None)
            if said is not None and said.rejected is not None:
                raise OperationRefused(f"refused: {said.rejected}")
            if said is not None:
                return SayResult(
                    run_id=run_id,
                    message_id=message.message_id,
                    status=state.status,
                    delivered="accepted",
                    note=accepted_note(run_id, said),
                )
            if is_terminal(state.status):
                raise OperationRefused(
                    f"run {run_id} ended as {state.status.value} before it took the message; "
                    f"`agentledger receipt {run_id}` shows how"
                )
            await asyncio.sleep(0.1)
        return SayResult(
            run_id=run_id,
            message_id=message.message_id,
            status=before.status,
            delivered="recorded",
            note=(
                "recorded: the server holds the message in the run's history and the run takes it "
                "at its next model call, unless it ends first (its receipt then lists the message "
                f"as not taken); `agentledger status {run_id}` shows when it did"
            ),
        )

    async def _within_policy(self, run_id: str, asked: DoubleTexting, deadline: Deadline) -> None:
        """Refuse a double-texting policy the run's tenant does not let a message ask for."""
        tenant = await self.scope.tenant_of_run(run_id)
        limits = await TenantStore(await self.scope.database()).limits(tenant)
        refusal = limits.double_texting_refusal(asked)
        if refusal is not None:
            raise OperationRefused(refusal)

    async def end_session(
        self, run_id: str, *, by: str = "cli", wait: float | None = None
    ) -> ControlResult:
        """End a session on purpose: it completes with its last answer and writes its receipt,
        at once when idle, else when its current turn has answered. An update when a worker
        answers; else a signal the run keeps and applies when a worker takes it."""
        input = ControlInput(by=by)
        bounds.check(input, "control")
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        run = await self.scope.running(run_id, deadline)
        if not await _is_session(client, run, deadline):
            raise OperationRefused(
                f"run {run_id} is not a session (its spec has no `session`), so it ends with its "
                f"answer; `agentledger cancel {run_id}` stops it now"
            )
        return await self._send(
            run,
            RunMessages.END_SESSION,
            input,
            deadline,
            False,
            when="as soon as the session is idle",
        )

    async def _send(
        self,
        run: RunRef,
        intent: Message,
        input: ControlInput,
        deadline: Deadline,
        paused: bool,
        when: str = "at its next step boundary",
    ) -> ControlResult:
        """A pause, a resume or a session's end of a run found already: its update when a
        worker answers and the run takes it, else its kept signal."""
        what = intent.noun
        client = await self.scope.temporal(deadline.left())
        mirror = await self.scope.mirror()
        try:
            await handles.ask_within(client, run.handle, AgentRunWorkflow.state, deadline)
        except NoAnswer:
            await handles.signal_within(run.handle, intent, input, deadline)
            return ControlResult(
                status=await handles.last_status(run, mirror),
                paused=paused,
                message=handles.recorded(what, run),
            )
        try:
            accepted = await handles.admit_update(
                client, run.handle, intent, input, deadline.share(0.5)
            )
        except handles.NotAdmitted as err:
            await handles.signal_within(run.handle, intent, input, deadline)
            return ControlResult(
                status=await handles.last_status(run, mirror),
                paused=paused,
                message=(
                    f"recorded: {err.reason}, so the {what} went as a signal; the run holds "
                    f"it in its history and applies it {when}"
                ),
            )
        try:
            return await within(  # type: ignore[no-any-return]
                deadline.left(), accepted.result(rpc_timeout=timedelta(seconds=deadline.left()))
            )
        except WorkflowUpdateFailedError as err:
            raise OperationRefused(f"refused: {handles.refusal(err)}") from err
        except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            return ControlResult(
                status=await handles.last_status(run, mirror),
                paused=paused,
                message=f"recorded: the run accepted the {what} (its history holds it)",
            )


def accepted_note(run_id: str, said: RunMessage) -> str:
    """What a message accepted by the run will do, by its double-texting policy."""
    follow = f"`agentledger status {run_id}` shows when it did"
    if said.turn_arrived is None or said.double_texting is None:
        return f"accepted: the run takes the message at its next model call; {follow}"
    turn = said.turn_arrived
    return {
        "enqueue": f"accepted: it starts the next turn once turn {turn} has answered; {follow}",
        "interrupt": f"accepted: turn {turn} ends at its next step boundary (its work kept) and "
        f"the message starts the next; {follow}",
        "rollback": f"accepted: turn {turn} is rolled back now (forgotten; side effects it made "
        f"stand) and the message starts the next; {follow}",
    }.get(said.double_texting, f"accepted; {follow}")


async def _is_session(client: Client, run: RunRef, deadline: Deadline) -> bool:
    """Whether the run's input (the first event of its history) has `session`; True when
    the server does not say in time (the run itself then ignores an end that does not
    apply, and records why)."""

    async def first_input() -> RunInput | None:
        async for event in run.handle.fetch_history_events(
            page_size=1, rpc_timeout=timedelta(seconds=deadline.share(0.3))
        ):
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                return None
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [started] = await client.data_converter.decode(payloads, [RunInput])
            return started if isinstance(started, RunInput) else None
        return None

    try:
        started = await within(deadline.share(0.3), first_input())
    except (NoAnswer, RPCError):
        return True
    return started is None or started.session is not None
