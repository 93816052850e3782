"""`client.sessions`: converse with a session run (spec `session`) and end it on purpose.

A turn of a conversation (`agentledger chat`): the message goes as `say` sends it (another
tenant's run reads as missing), then the run's live stream (agentledger.client.watch) is
followed from where the run received the message to where it answered it: a session's
`session.turn_answered` naming the message, or the run's end (and receipt). An approval the
turn waits for ends the turn's items with `chat.approval_pending`, so a caller can decide
and follow on (`from_offset`). Every wait is bounded: no worker to take the message, or
nothing from the run for `answer_within` seconds, ends the items with `chat.no_answer`,
saying why and what to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from agentledger.client import handles
from agentledger.client.scope import Scope
from agentledger.client.steering import Steering
from agentledger.client.watch import watch
from agentledger.core.advice import worker_command
from agentledger.core.events import EventType
from agentledger.core.results import ControlResult, RunState, WatchItem
from agentledger.core.states import RunStatus
from agentledger.temporal.worker_presence import Deadline, NoAnswer
from agentledger.workflows import AgentRunWorkflow

# How long a turn may go without a word from the run before chat says so and returns.
ANSWER_WITHIN_SECONDS = 300.0


class Sessions:
    """The caller's session runs: a turn at a time, until one of them ends it."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def chat(
        self,
        run_id: str,
        message: str | None,
        *,
        by: str = "cli",
        from_offset: int = 0,
        wait: float | None = None,
        answer_within: float = ANSWER_WITHIN_SECONDS,
    ) -> AsyncIterator[WatchItem]:
        """Say `message` to the run and follow it until it has answered: its events and model
        text, ending with a session's `session.turn_answered` (or the run's end and receipt).
        Ends early, saying why, with `chat.approval_pending` (decide, then follow on with
        `message=None, from_offset=` its `next_offset`) or `chat.no_answer` (no worker took
        the message, or nothing came for `answer_within` seconds)."""
        return chat(
            self.scope,
            run_id,
            message,
            by=by,
            from_offset=from_offset,
            wait=self.scope.bound(wait),
            answer_within=answer_within,
        )

    async def end(
        self, run_id: str, *, by: str = "cli", wait: float | None = None
    ) -> ControlResult:
        """End a session on purpose: it completes with its last answer and its receipt, at
        once when idle, else after its current turn (kept while no worker runs). Refused for
        a run that is not a session, or has ended."""
        return await Steering(self.scope).end_session(run_id, by=by, wait=wait)


def note(type: str, **data: object) -> WatchItem:
    return WatchItem(kind="event", type=type, data=dict(data))


async def chat(
    scope: Scope,
    run_id: str,
    text: str | None,
    *,
    by: str,
    from_offset: int,
    wait: float,
    answer_within: float,
) -> AsyncIterator[WatchItem]:
    """Say `text` to the run and yield what it does until it has answered it (None: follow
    the turn in progress from `from_offset`, e.g. after an approval)."""
    client = await scope.temporal(wait)
    message_id: str | None = None
    if text is not None:
        said = await Steering(scope).say(run_id, text, by=by, wait=wait)
        message_id = said.message_id
        yield note(EventType.CHAT_SAID, **said.model_dump(mode="json"))
        if said.delivered == "recorded":
            yield note(
                EventType.CHAT_NO_ANSWER,
                reason="no_worker",
                note=f"no worker answered within {wait:g}s: the message is recorded and "
                f"run {run_id} takes it when a worker runs ({worker_command()}); "
                f"`agentledger watch {run_id}` follows it then",
            )
            return
    items = watch(
        scope,
        run_id,
        from_offset=from_offset,
        wait=wait,
        poll_cooldown=timedelta(milliseconds=100),
    )
    following = message_id is None
    try:
        while True:
            try:
                item = await asyncio.wait_for(anext(items), answer_within)
            except StopAsyncIteration:
                return
            except TimeoutError:
                yield note(
                    EventType.CHAT_NO_ANSWER,
                    reason="silent",
                    note=f"nothing from run {run_id} for {answer_within:g}s: is a worker "
                    f"running? ({worker_command()}); `agentledger status {run_id}` "
                    "shows where "
                    "it is, `agentledger watch` follows it",
                )
                return
            if not following:
                # The stream from its start: what the run did before it received this message
                # belongs to earlier turns.
                following = item.type == EventType.MESSAGE_RECEIVED and (
                    item.data.get("message_id") == message_id
                )
                if not following:
                    continue
                yield item
                held = await _held(client, run_id, wait, item)
                if held is not None:  # it waits for a person, as it did before the message
                    yield held
                    return
                continue
            yield item
            if item.type == EventType.SESSION_TURN_ANSWERED and (
                message_id is None or message_id in item.data.get("message_ids", [])
            ):
                return
            if item.type == EventType.APPROVAL_REQUESTED and await _still_pending(
                client, run_id, wait, item
            ):
                yield approval_pending(run_id, item.data, (item.offset or 0) + 1)
                return
            if item.type == EventType.RECEIPT:
                return
    finally:
        await items.aclose()  # type: ignore[attr-defined]


def approval_pending(run_id: str, approval: dict[str, Any], next_offset: int) -> WatchItem:
    role = approval.get("required_role") or "approver"
    return note(
        EventType.CHAT_APPROVAL_PENDING,
        **approval,
        next_offset=next_offset,
        note=f"the turn waits for a decision: `agentledger approve {run_id} --by NAME "
        f"--role {role}` or `agentledger reject`",
    )


async def _state(client: Client, run_id: str, wait: float) -> RunState | None:
    try:
        state: RunState = await handles.ask_within(
            client, client.get_workflow_handle(run_id), AgentRunWorkflow.state, Deadline(wait)
        )
    except NoAnswer:
        return None
    return state


async def _still_pending(client: Client, run_id: str, wait: float, asked: WatchItem) -> bool:
    """Whether the approval the stream shows asked is still undecided (a chat that follows
    on after deciding it reads its request again)."""
    state = await _state(client, run_id, wait)
    pending = state.pending_approval if state is not None else None
    return state is None or (
        pending is not None and pending.approval_id == asked.data.get("approval_id")
    )


async def _held(client: Client, run_id: str, wait: float, received: WatchItem) -> WatchItem | None:
    """What the run waited for when the message came, if a person must act first: an
    approval asked before the message (so not on the stream after it), or a pause."""
    state = await _state(client, run_id, wait)
    if state is None:
        return None
    after = (received.offset or 0) + 1
    if state.pending_approval is not None:
        return approval_pending(run_id, state.pending_approval.model_dump(mode="json"), after)
    if state.status == RunStatus.PAUSED:
        return note(
            EventType.CHAT_NO_ANSWER,
            reason="paused",
            next_offset=after,
            note=f"run {run_id} is paused ({state.pause_reason or 'on request'}): it takes the "
            f"message once resumed (`agentledger resume {run_id}`)",
        )
    return None
