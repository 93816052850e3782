"""Saying something to a run in flight (`agentledger say`): docs/steering.md.

The message goes as a signal, which the server keeps in the run's history whether or not a
worker runs, as a decision is kept; the run takes it at its next model call (or, with
`on_message: interrupt`, cancels the call in flight for it). A message to a run that has
ended, or that the caller may not see, is refused before anything is sent.

`end_session` (`agentledger end`) ends a session on purpose, as pause and resume go: an update
when a worker answers, else a signal the server keeps for when one does.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from psycopg_pool import AsyncConnectionPool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.core import bounds
from agentledger.core import constants as names
from agentledger.core._state import RunInput
from agentledger.core._wire import ControlInput, SayInput
from agentledger.core.errors import InvalidRequest, OperationRefused
from agentledger.core.results import ControlResult, RunState, SayResult
from agentledger.core.states import is_terminal
from agentledger.ops import handles
from agentledger.ops.operations import RunRef, _last_status, _recorded, _running, control_run
from agentledger.temporal.worker_presence import DEFAULT_WAIT_SECONDS, Deadline, NoAnswer, within
from agentledger.workflows import AgentRunWorkflow


async def say(
    client: Client,
    run_id: str,
    text: str,
    *,
    by: str = "cli",
    message_id: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> SayResult:
    """Add `text` to the run's conversation as a message from `by`; `message_id` (made when
    not given) makes a second send of the same message change nothing."""
    if not text.strip():
        raise InvalidRequest(
            'say needs a message: `agentledger say RUN "what the agent should know"`'
        )
    message = SayInput(message_id=message_id or uuid.uuid4().hex, text=text, by=by)
    bounds.check(message, "message")
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
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
    await handles.signal_within(run.handle, AgentRunWorkflow.say_signal, message, deadline)
    if before is None:
        return SayResult(
            run_id=run_id,
            message_id=message.message_id,
            status=await _last_status(run, mirror),
            delivered="recorded",
            note=_recorded("message", run),
        )
    while deadline.left() > 0.1:
        try:
            state: RunState = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.state, deadline
            )
        except NoAnswer:
            break
        if any(m.message_id == message.message_id for m in state.messages):
            return SayResult(
                run_id=run_id,
                message_id=message.message_id,
                status=state.status,
                delivered="accepted",
                note="accepted: the run takes the message at its next model call; "
                f"`agentledger status {run_id}` shows when it did",
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


async def end_session(
    client: Client,
    run_id: str,
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> ControlResult:
    """End a session on purpose: it completes with its last answer and writes its receipt,
    at once when idle, else when its current turn has answered. An update when a worker
    answers; else a signal the run keeps and applies when a worker takes it."""
    input = ControlInput(by=by)
    bounds.check(input, "control")
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    if not await _is_session(client, run, deadline):
        raise OperationRefused(
            f"run {run_id} is not a session (its spec has no `session`), so it ends with its "
            f"answer; `agentledger cancel {run_id}` stops it now"
        )
    return await control_run(
        client,
        run,
        (names.UPDATE_END_SESSION, AgentRunWorkflow.end_session_signal),
        input,
        deadline,
        False,
        "end",
        mirror,
        when="as soon as the session is idle",
    )


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
