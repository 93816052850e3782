"""Saying something to a run in flight (`agentrun say`): docs/steering.md.

The message goes as a signal, which the server keeps in the run's history whether or not a
worker runs, as a decision is kept; the run takes it at its next model call (or, with
`on_message: interrupt`, cancels the call in flight for it). A message to a run that has
ended, or that the caller may not see, is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import uuid

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentrun.core import bounds
from agentrun.core._wire import SayInput
from agentrun.core.errors import InvalidRequest, OperationRefused
from agentrun.core.results import RunState, SayResult
from agentrun.core.states import is_terminal
from agentrun.ops import handles
from agentrun.ops.operations import _last_status, _recorded, _running
from agentrun.temporal.worker_presence import DEFAULT_WAIT_SECONDS, Deadline, NoAnswer
from agentrun.workflows import AgentRunWorkflow


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
        raise InvalidRequest('say needs a message: `agentrun say RUN "what the agent should know"`')
    message = SayInput(message_id=message_id or uuid.uuid4().hex, text=text, by=by)
    bounds.check(message, "message")
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    try:
        before: RunState | None = await handles.ask_within(
            run.handle, AgentRunWorkflow.state, deadline, 0.3
        )
    except NoAnswer:
        before = None
    if before is not None and is_terminal(before.status):
        raise OperationRefused(
            f"run {run_id} has already ended as {before.status.value}; "
            f"`agentrun receipt {run_id}` shows how"
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
            state: RunState = await handles.ask_within(run.handle, AgentRunWorkflow.state, deadline)
        except NoAnswer:
            break
        if any(m.message_id == message.message_id for m in state.messages):
            return SayResult(
                run_id=run_id,
                message_id=message.message_id,
                status=state.status,
                delivered="accepted",
                note="accepted: the run takes the message at its next model call; "
                f"`agentrun status {run_id}` shows when it did",
            )
        if is_terminal(state.status):
            raise OperationRefused(
                f"run {run_id} ended as {state.status.value} before it took the message; "
                f"`agentrun receipt {run_id}` shows how"
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
            f"as not taken); `agentrun status {run_id}` shows when it did"
        ),
    )
