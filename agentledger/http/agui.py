"""POST /v1/agents/{agent}/agui: an agent profile over the AG-UI protocol, on a durable run.

An AG-UI thread is one agentledger run of the caller's tenant, named by the thread: its
idempotency key is `agui.<threadId>`, so the thread's run id follows from (tenant, thread)
alone, and a client that went away and comes back (or a server restarted in between) finds
the same run. A request on a new thread starts the run, its task the last user message; a
request on a thread that has a run tells that run's story again from its start, then live.
The response is the story as AG-UI events (agentledger.http.agui_events) over SSE.

An approval ends the AG-UI run with an interrupt outcome. The client answers with a new
RunAgentInput on the same thread whose `resume` entry names the interrupt: payload
`{"approved": true}`, `{"approved": true, "editedArgs": {...}}` (an edit: the arguments to
change) or `{"approved": false, "reason": "..."}`; `status: "cancelled"` rejects. The
decision is the caller's (its identity is the approver the receipt names), taken before
the stream opens, so a refused one (a wrong interrupt, an edit the tool would not take)
is a plain HTTP error and changes nothing; the stream then goes on from that approval. A
resume sent again for an approval already decided just streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import BaseEvent, Event, ResumeEntry, RunAgentInput, RunErrorEvent, UserMessage
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.routing import Route

from agentledger import profiles
from agentledger.client.run_client import RunClient
from agentledger.core.access import Caller
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import AgentLedgerError, InvalidRequest, OperationRefused
from agentledger.core.events import EventType
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.http import event_streams
from agentledger.http.agui_events import AguiStory
from agentledger.http.auth import door_of
from agentledger.http.endpoints import Call, Endpoint, RoleOfBody, routes_of

THREAD_KEY_PREFIX = "agui."
UNAUTHENTICATED = "agentledger.unauthenticated"
# A step's mirror row lands with the run's next write, a moment after its event.
STEP_ROW_SECONDS = 10.0


def thread_key(thread_id: str) -> str:
    """The idempotency key of a thread's run: with the tenant, it names the run."""
    return THREAD_KEY_PREFIX + thread_id


def task_of(request: RunAgentInput) -> str:
    """The thread's task: its last user message's text."""
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            content = message.content
            text = (
                content
                if isinstance(content, str)
                else " ".join(str(getattr(part, "text", "")) for part in content)
            )
            if text.strip():
                return text
    raise InvalidRequest("a new thread needs a user message with text: it is the run's task")


def decision(entry: ResumeEntry) -> tuple[bool, JsonDict | None, str | None]:
    """(approve?, edit, reason) of a resume entry, or InvalidRequest saying what it takes."""
    if entry.status == "cancelled":
        return False, None, "cancelled by the AG-UI client"
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise InvalidRequest(
            f'resume of {entry.interrupt_id!r}: the payload takes {{"approved": true|false}}, '
            'with "editedArgs" (an object) to edit or "reason" (text) to reject'
        )
    edit = payload.get("editedArgs")
    if edit is not None and not isinstance(edit, dict):
        raise InvalidRequest(f"resume of {entry.interrupt_id!r}: editedArgs must be an object")
    reason = payload.get("reason")
    return payload["approved"], edit, str(reason) if reason else None


async def answer_interrupt(client: RunClient, run_id: str, entry: ResumeEntry, who: Caller) -> None:
    """Decide the approval `entry` answers, as the caller; nothing if it was decided already
    (a resume sent again)."""
    approve, edit, reason = decision(entry)
    state = await client.runs.status(run_id)
    pending = state.pending_approval
    if pending is None or pending.approval_id != entry.interrupt_id:
        if any(seen.approval_id == entry.interrupt_id for seen in state.decided):
            return
        waits = f"it waits for {pending.approval_id!r}" if pending else "it waits for none"
        raise OperationRefused(
            f"interrupt {entry.interrupt_id!r} is not pending on this thread ({waits}); "
            "resume the interrupt the last RUN_FINISHED named"
        )
    common: dict[str, Any] = {
        "by": who.identity.name,
        "role": pending.required_role,
        "action_hash": pending.action_hash,
    }
    if approve:
        await client.runs.approve(run_id, edit=edit, **common)
    else:
        await client.runs.reject(run_id, reason=reason or "rejected by the AG-UI client", **common)


async def step_row(client: RunClient, run_id: str, step_id: str) -> JsonDict | None:
    """The step's mirror row once it holds the step's output (or error); what there is
    after `STEP_ROW_SECONDS`."""
    deadline = asyncio.get_running_loop().time() + STEP_ROW_SECONDS
    while True:
        row = await client.runs.step_record(run_id, step_id)
        done = row is not None and (row.output is not None or row.error)
        if done or asyncio.get_running_loop().time() > deadline:
            return None if row is None else row.model_dump()
        await asyncio.sleep(0.1)


async def still_pending(client: RunClient, run_id: str, approval_id: str | None) -> bool:
    """Whether the run waits for this approval now (a story told again passes over those
    decided since)."""
    pending = (await client.runs.status(run_id)).pending_approval
    return pending is not None and pending.approval_id == approval_id


async def story(
    client: RunClient, run_id: str, request: RunAgentInput, passed: set[str]
) -> AsyncIterator[BaseEvent]:
    """The AG-UI run: the thread's run's items from its start, those up to the approvals
    `passed` (answered by this request) taken in silently, until the run ends or waits."""
    told = AguiStory(request, run_id)
    yield told.started(request)
    waiting = set(passed)
    if not waiting:
        yield told.snapshot()
    items = client.runs.watch(run_id)
    try:
        async for item in items:
            if waiting:
                told.follow(item)
                if item.type == EventType.APPROVAL_REQUESTED and item.step_id in waiting:
                    waiting.discard(item.step_id)
                    if not waiting:
                        yield told.snapshot()
                continue
            row, decided = None, False
            if told.needs_row(item) and item.step_id is not None:
                row = await step_row(client, run_id, item.step_id)
            if item.type == EventType.APPROVAL_REQUESTED:
                decided = not await still_pending(client, run_id, item.step_id)
            for event in told.translate(item, row, decided=decided):
                yield event
            if told.ended:
                return
        yield RunErrorEvent(message="the run's story ended before its receipt", code="agentledger")
    except AgentLedgerError as err:
        yield RunErrorEvent(message=str(err), code=f"agentledger.{type(err).__name__}")
    finally:
        await items.aclose()  # type: ignore[attr-defined]


def spec_of(client: RunClient, agent: str, request: RunAgentInput, who: Caller) -> RunSpec:
    source = client.config.agents or DEMO_AGENTS
    agents = profiles.load_agents(source)
    fields = profiles.pick(agents, agent, source).spec_fields(agents)
    fields.update(
        task=task_of(request),
        user=who.identity.name,
        idempotency_key=thread_key(request.thread_id),
    )
    try:
        return RunSpec.model_validate(fields)
    except ValidationError as err:
        raise InvalidRequest(f"the thread's run: {err.errors()[0]['msg']}") from err


async def begin(
    call: Call[RunAgentInput], client: RunClient, run_input: RunAgentInput
) -> tuple[str, set[str]]:
    """The thread's run, started if new, its interrupts answered by a resume; and the
    approvals the stream passes over (those this request answered)."""
    who = call.who
    if not run_input.resume:
        spec = spec_of(client, call.path("agent"), run_input, who)
        started = await client.runs.start(spec=spec, require_tools=True)
        return started.run_id, set()
    run_id = client.runs.id_of(thread_key(run_input.thread_id))
    await client.runs.inspect(run_id)  # 404 for a thread with no run (or another tenant's)
    for entry in run_input.resume:
        await answer_interrupt(client, run_id, entry, who)
    return run_id, {entry.interrupt_id for entry in run_input.resume}


def role_for(run_input: RunAgentInput) -> str:
    """Deciding is an approver's act; starting a thread's run a runner's."""
    return "approver" if run_input.resume else "runner"


async def agui(call: Call[RunAgentInput]) -> EventSourceResponse:
    """Run the agent on an AG-UI thread, or resume the thread with your decisions.

    The body is AG-UI's RunAgentInput; the answer, AG-UI events. A request with `resume`
    decides the interrupts it names (the approver role); one without starts the thread's
    run, or tells its story again (the runner role)."""
    run_input, client = call.input, call.runs
    # The stream's slot first: a decision is never taken for a stream refused after it.
    streams = door_of(call.request).streams
    stream = streams.take(call.who)
    try:
        run_id, passed = await begin(call, client, run_input)
    except BaseException:
        streams.give_back(stream)
        raise
    encoder = EventEncoder()

    async def events() -> AsyncIterator[bytes]:
        async for event in streams.follow(stream, story(client, run_id, run_input, passed)):
            yield encoder.encode(event).encode()
        if stream.ended:
            ended = RunErrorEvent(message=f"{stream.why}; the stream ends", code=UNAUTHENTICATED)
            yield encoder.encode(ended).encode()

    return event_streams.response(events(), streams, stream)


ENDPOINTS = [
    Endpoint(
        "POST",
        "/v1/agents/{agent}/agui",
        agui,
        RoleOfBody(("runner", "approver"), role_for),
        body=RunAgentInput,
        answer=Event,
        events="AG-UI events, one per `data:` line (RUN_STARTED ... RUN_FINISHED or RUN_ERROR)",
    )
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
