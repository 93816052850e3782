"""MCP at `/mcp` in `agentledger serve` (streamable HTTP, the official `mcp` package's
low-level server): each agent the caller's tenant may run is a tool, each run's receipt
and events a read-only resource.

A tool call starts a durable run of the caller's tenant, named for nothing the caller
sends, and answers in the way the caller's client can follow it:

- a client that declares the Tasks extension (`io.modelcontextprotocol/tasks`) gets a
  task at once, the run's id: it polls `tasks/get`, answers an approval with
  `tasks/update`, stops it with `tasks/cancel`, and a restarted server finds the same
  task, since the task is the run;
- any other client is sent progress notifications (one per event) until the run ends,
  then its answer and a link to its receipt.

An approval is an elicitation form when the client can show one (it declares
`elicitation`) and the caller's credential may decide (the approver role): on protocol
2026-07-28 the call answers `input_required` and the client's retry carries the answer;
on the handshake era (2025-11-25) the form is sent on the session. Anyone else is told
that the run waits for approval and where an approver decides it (the inbox); the run
keeps waiting, holding no worker, and goes on once decided.

The door decides who calls: the credential is checked before the SDK reads a byte (401,
429), and each method needs its role (`NEEDS`), refused as a JSON-RPC error that says
which. Nothing an MCP message carries names a tenant or a role.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentledger.client.run_client import RunClient
from agentledger.client.scope import refuse_requested_tenant
from agentledger.core.access import Caller
from agentledger.core.errors import (
    AgentLedgerError,
    InvalidInput,
    NotFound,
    Refused,
)
from agentledger.core.events import EventType
from agentledger.core.results import PendingApproval, Receipt
from agentledger.http import mcp_runs
from agentledger.http.agent_faces import agent_named, agents_for, start_agent
from agentledger.http.auth import caller, door_of, runs_for
from agentledger.http.errors import HttpRefusal
from agentledger.http.request_body import read_whole

PATH = "/mcp"
SERVER_NAME = "agentledger"
CALLER = "agentledger_caller"
# What each request method needs of the caller; any other, a viewer's.
NEEDS = {"tools/call": "runner", "tasks/update": "approver", "tasks/cancel": "runner"}
RECENT_RUNS = 20
# How long a call asks Temporal whether a worker serves the runs' queue.
UNSERVED_SECONDS = 2.0
TASK_REQUIRED: dict[str, Any] = {
    "requiredCapabilities": {"extensions": {mcp_runs.TASKS_EXTENSION: {}}}
}


# ---------------------------------------------------------------- who calls


@dataclass
class Call:
    """One request's caller, its tenant's client, and how to reach the door."""

    who: Caller
    client: RunClient
    request: Request
    ctx: ServerRequestContext[Any, Any]

    @property
    def base(self) -> str:
        return str(self.request.base_url).rstrip("/")

    def can_elicit(self) -> bool:
        wants = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        return self.ctx.session.check_client_capability(wants)

    def uses_tasks(self) -> bool:
        declared = self.ctx.session.client_capabilities
        return bool(
            declared and declared.extensions and mcp_runs.TASKS_EXTENSION in declared.extensions
        )

    def may_decide(self) -> bool:
        return self.who.may("approver")


def call_of(ctx: ServerRequestContext[Any, Any]) -> Call:
    request = ctx.request
    assert isinstance(request, Request), "MCP requests come through McpFace only"
    who = getattr(request.state, CALLER, None)
    assert isinstance(who, Caller), "McpFace authenticates every request first"
    return Call(who, runs_for(request, who), request, ctx)


def forbidden(method: str, need: str, who: Caller) -> MCPError:
    have = ", ".join(sorted(who.roles)) or "no role"
    return MCPError(
        INVALID_REQUEST, f"forbidden: {method} needs the {need} role; this credential has {have}"
    )


def mcp_error(err: AgentLedgerError | HttpRefusal) -> MCPError:
    """An agentledger refusal as the JSON-RPC error an MCP client reads (an unknown task,
    tool or run, or another tenant's, is INVALID_PARAMS, as the Tasks spec asks)."""
    if isinstance(err, HttpRefusal):
        return MCPError(INVALID_REQUEST, f"{err.kind}: {err}")
    if isinstance(err, NotFound | InvalidInput):
        return MCPError(INVALID_PARAMS, str(err))
    if isinstance(err, Refused):
        return MCPError(INVALID_REQUEST, f"refused: {err}")
    return MCPError(INTERNAL_ERROR, f"{err.kind}: {err}")


async def door_rules(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Every request: the method's role first, then agentledger's refusals as MCP errors."""
    if ctx.request_id is not None:
        call = call_of(ctx)
        need = NEEDS.get(ctx.method, "viewer")
        if not call.who.may(need):
            raise forbidden(ctx.method, need, call.who)
    try:
        return await call_next(ctx)
    except (AgentLedgerError, HttpRefusal) as err:
        raise mcp_error(err) from err


# ---------------------------------------------------------------- tools


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    agents = agents_for(call_of(ctx).client)
    return types.ListToolsResult(tools=[mcp_runs.tool_of(agent) for agent in agents.values()])


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
    """Start a run of the agent named (or, carrying an answer to its approval form, decide
    it), then answer as the client follows runs: a task, or the run to its end."""
    call = call_of(ctx)
    agent = agent_named(call.client, params.name)
    if params.request_state is not None:
        state = mcp_runs.read_state(params.request_state)
        answer = (params.input_responses or {}).get(mcp_runs.approval_key(state["approval"]))
        decided = await answer_approval(call, state["run"], state, answer)
        return await follow(call, state["run"], ask=decided, after=state["seq"])
    task, fields = mcp_runs.task_argument(params.arguments)
    refuse_requested_tenant(fields.pop("tenant", None))
    key = f"mcp.{uuid.uuid4().hex}"
    started = await start_agent(call.client, agent, task, call.who, key=key, fields=fields)
    if call.uses_tasks():
        return mcp_runs.created_task(started.run_id)
    # No worker to take it: say so now rather than hold the call open until one comes.
    unserved = await call.client.runs.unserved_warning(wait=UNSERVED_SECONDS)
    if unserved is not None:
        return mcp_runs.queued_result(call.base, started.run_id, unserved)
    return await follow(call, started.run_id, ask=True)


async def decide(
    call: Call, run_id: str, pending: PendingApproval, answer: Any, action_hash: str
) -> bool:
    """Apply the form's answer to the pending approval as the caller; False if it was
    dismissed (nothing decided)."""
    if not call.may_decide():
        raise forbidden("deciding an approval", "approver", call.who)
    decision = mcp_runs.decision_of(pending, answer)
    if decision is None:
        return False
    common: dict[str, Any] = {
        "by": call.who.identity.name,
        "role": pending.required_role,
        "action_hash": action_hash,
    }
    if decision.approve:
        await call.client.runs.approve(run_id, edit=decision.edit, **common)
    else:
        await call.client.runs.reject(run_id, reason=decision.reason, **common)
    return True


async def answer_approval(call: Call, run_id: str, state: dict[str, Any], answer: Any) -> bool:
    """The answer a client's retry carries, applied if the approval it was shown still
    waits (one decided meanwhile, in the inbox say, is left as decided). False when the
    person dismissed the form: the run is then followed without asking again."""
    pending = (await call.client.runs.status(run_id)).pending_approval
    if pending is None or pending.approval_id != state["approval"]:
        return True
    return await decide(call, run_id, pending, mcp_runs.form_answer(answer), state["action_hash"])


async def ask_on_session(call: Call, run_id: str, pending: PendingApproval) -> bool:
    """The handshake era: the form sent on the session, waited for until the approval
    expires; False when nothing was decided."""
    form = mcp_runs.approval_form(pending).params
    assert isinstance(form, types.ElicitRequestFormParams)
    left = (pending.expires_at - datetime.now(UTC)).total_seconds()
    try:
        async with asyncio.timeout(max(left, 1.0)):
            answer = await call.ctx.session.elicit_form(
                form.message, form.requested_schema, call.ctx.request_id
            )
    except TimeoutError:
        return False
    return await decide(call, run_id, pending, answer, pending.action_hash)


async def follow(
    call: Call, run_id: str, *, ask: bool, after: int = 0
) -> types.CallToolResult | types.InputRequiredResult:
    """The run's events after event `after` as progress (each numbered by its place in the
    run, so a call's rounds go on counting where the last stopped) until it ends (its
    result), a session turn is answered, or an approval waits: asked as a form where the
    client and the credential can, else told as waiting. A replayed approval already
    decided is passed over."""
    client = call.client
    # Following a run holds one of the credential's event streams, and ends with it.
    streams = door_of(call.request).streams
    stream = streams.take(call.who)
    items = client.runs.watch(run_id)
    try:
        async for item in streams.follow(stream, items):
            if item.kind == "receipt":
                return mcp_runs.ended_result(call.base, Receipt.model_validate(item.data))
            if item.seq is None or item.seq <= after:
                continue
            words = mcp_runs.progress_words(item)
            if words is not None:
                await call.ctx.session.report_progress(item.seq, None, words)
            if item.type == EventType.SESSION_TURN_ANSWERED:
                return mcp_runs.turn_result(call.base, run_id, item.data)
            if item.type != EventType.APPROVAL_REQUESTED:
                continue
            pending = (await client.runs.status(run_id)).pending_approval
            if pending is None or pending.approval_id != item.data.get("approval_id"):
                continue
            if not (ask and call.may_decide() and call.can_elicit()):
                return mcp_runs.waiting_result(call.base, run_id, pending)
            if not call.ctx.session.can_send_request:
                return mcp_runs.asking(run_id, pending, item.seq)
            if not await ask_on_session(call, run_id, pending):
                return mcp_runs.waiting_result(call.base, run_id, pending)
    finally:
        await items.aclose()  # type: ignore[attr-defined]
        streams.give_back(stream)
    if stream.ended:
        raise MCPError(INVALID_REQUEST, f"unauthenticated: {stream.why}; the call ends")
    raise MCPError(INTERNAL_ERROR, f"the story of run {run_id} ended without its receipt")


# ---------------------------------------------------------------- resources


async def list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    """The tenant's latest runs: each one's events, and an ended one's receipt."""
    rows = await call_of(ctx).client.runs.recent(limit=RECENT_RUNS)
    found: list[types.Resource] = []
    for row in rows:
        found.extend(mcp_runs.run_resources(row.run_id, row.status, row.task or ""))
    return types.ListResourcesResult(resources=found)


async def list_resource_templates(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=mcp_runs.RESOURCE_TEMPLATES)


async def read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    client = call_of(ctx).client
    run_id, what = mcp_runs.run_of_uri(params.uri)
    if what == "receipt":
        receipt = await client.runs.receipt(run_id)
        return mcp_runs.json_contents(params.uri, receipt.model_dump(mode="json"))
    events = await client.tasks.events(run_id)
    return mcp_runs.json_contents(params.uri, [e.model_dump(mode="json") for e in events])


# ---------------------------------------------------------------- tasks


class TaskParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(TaskParams):
    input_responses: dict[str, Any]


def tasks_call(ctx: ServerRequestContext[Any, Any]) -> Call:
    """The caller of a tasks/* method, which only a client declaring the extension sends."""
    call = call_of(ctx)
    if not call.uses_tasks():
        raise MCPError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            TASK_REQUIRED,
        )
    return call


async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    """The run as a task: working; input_required with its approval form, for a caller
    who may decide and whose client shows forms; completed with the tool's result."""
    call = tasks_call(ctx)
    client, run_id = call.client, params.task_id
    run = await client.runs.status(run_id)
    status = run.status.value
    if status in ("completed", "failed"):
        receipt = await client.runs.receipt(run_id)
        result = mcp_runs.ended_result(call.base, receipt)
        return mcp_runs.task_of(run, result=result)
    if status == "waiting_for_message":  # a session answered the call's turn
        turn = {"answer": run.result, "turn": len(run.turns)}
        result = mcp_runs.turn_result(call.base, run_id, turn)
        return mcp_runs.task_of(run, result=result)
    pending = run.pending_approval
    if pending is None:
        return mcp_runs.task_of(run)
    if call.may_decide() and call.can_elicit():
        return mcp_runs.task_of(run, asks=mcp_runs.approval_form(pending))
    waiting = mcp_runs.waiting_words(call.base, run_id, pending)
    return mcp_runs.task_of(run, waiting=waiting)


async def update_task(
    ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams
) -> dict[str, Any]:
    """Answers to the task's input requests: its pending approval's form, decided as the
    caller. An answer to a request not outstanding is passed over, as the spec asks."""
    call = tasks_call(ctx)
    run_id = params.task_id
    pending = (await call.client.runs.status(run_id)).pending_approval
    if pending is not None:
        key = mcp_runs.approval_key(pending.approval_id)
        answer = mcp_runs.form_answer(params.input_responses.get(key))
        if answer is not None:
            await decide(call, run_id, pending, answer, pending.action_hash)
    return {}


async def cancel_task(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
    await tasks_call(ctx).client.runs.cancel(params.task_id)
    return {}


# ---------------------------------------------------------------- the face


def mcp_server() -> Server[Any]:
    server: Server[Any] = Server(
        SERVER_NAME,
        title="agentledger",
        instructions=(
            "Each tool is an agent that runs durably: call it with a task; it answers with "
            "its result and a link to its receipt. Steps that need a person's approval ask "
            "for it, or say where it is decided."
        ),
        on_list_tools=list_tools,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )
    # A tool call may answer with a task, a shape the constructor's hook does not name.
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.add_request_handler("tasks/get", TaskParams, get_task)
    server.add_request_handler("tasks/update", TaskUpdateParams, update_task)
    server.add_request_handler("tasks/cancel", TaskParams, cancel_task)
    server.extensions[mcp_runs.TASKS_EXTENSION] = {}
    server.middleware.append(door_rules)
    return server


class McpFace:
    """`/mcp`: the credential checked, then the body read within the door's bounds, then the
    SDK's session manager. Its sessions (the handshake era's) run in a task group the app's
    lifespan holds, each bound to the credential that opened it."""

    def __init__(self, body_limit_bytes: int) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=mcp_server(), max_request_body_size=body_limit_bytes
        )

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        who = await caller(request, need="viewer")
        if request.method == "POST":  # read within the door's bounds, then the SDK's turn
            request = await read_whole(request, door_of(request).config)
            receive = request.receive
        scope.setdefault("state", {})[CALLER] = who
        token = AccessToken(
            token=who.credential,
            client_id=who.credential,
            scopes=sorted(who.roles),
            subject=who.identity.ref,
        )
        scope["user"] = AuthenticatedUser(token)
        await self.manager.handle_request(scope, receive, send)

    def routes(self) -> list[Route]:
        return [Route(PATH, self, methods=["GET", "POST", "DELETE"])]
