"""A2A (the `a2a-sdk`'s JSON-RPC binding, protocol 1.0) for every agent a tenant may run:
`POST /a2a/{agent}` and its card at `/a2a/{agent}/.well-known/agent-card.json`; the first
agent's card also at `/.well-known/agent-card.json`.

A task is a durable run of the caller's tenant; its id is the run's id, so another
tenant's task reads as not found, and a server restarted in between finds the same task.
A new message starts a run named by its `messageId` (the same message twice is one run);
a message on a task tells the run something, or, carrying a decision, answers its
approval, which the task shows as `input-required`. For an agent whose profile makes
sessions, a context is a session: its first message starts the session run, and each
later message in the context (with the task's id or without) is the run's next turn, as
`agentledger chat` says one; the task waits `input-required` between turns.

The request handler here is the SDK's interface implemented over `RunClient` (no in-memory
task store: the run is the task), behind the door's credential, roles and limits: the
caller is authenticated before the body is read, and each method needs its role (a
decision an approver's, a start or a cancel a runner's, a read a viewer's), refused with
403 as over REST.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentledger.client.run_client import RunClient
from agentledger.client.scope import refuse_requested_tenant
from agentledger.core import task_states
from agentledger.core.access import Caller
from agentledger.core.errors import AgentLedgerError, InvalidInput, NotFound, Refused
from agentledger.core.events import EventType
from agentledger.core.results import WatchItem
from agentledger.core.states import TERMINAL, is_terminal
from agentledger.http import a2a_tasks
from agentledger.http.a2a_tasks import Event, TaskStory
from agentledger.http.agent_faces import agent_named, agents_for, start_agent
from agentledger.http.auth import caller, door_of, runs_for
from agentledger.http.errors import HttpRefusal
from agentledger.http.events_api import Position, after, last_seen
from agentledger.http.request_body import read_whole
from agentledger.profiles import Agent

Marker = Callable[[WatchItem], bool]
WELL_KNOWN = "/.well-known/agent-card.json"
BINDING = "JSONRPC"
STREAMING = ("SendStreamingMessage", "SubscribeToTask")
# What each method needs of the caller; a message is a runner's unless it decides.
NEEDS = {
    "SendMessage": "runner",
    "SendStreamingMessage": "runner",
    "GetTask": "viewer",
    "ListTasks": "viewer",
    "CancelTask": "runner",
    "SubscribeToTask": "viewer",
    "CreateTaskPushNotificationConfig": "runner",
    "GetTaskPushNotificationConfig": "viewer",
    "ListTaskPushNotificationConfigs": "viewer",
    "DeleteTaskPushNotificationConfig": "runner",
    "GetExtendedAgentCard": "viewer",
}


class Call:
    """One request's caller, its tenant's client, the agent addressed and the request."""

    def __init__(self, who: Caller, client: RunClient, agent: Agent, request: Request) -> None:
        self.who = who
        self.client = client
        self.agent = agent
        self.request = request


def call_of(context: ServerCallContext) -> Call:
    found = context.state.get("agentledger")
    assert isinstance(found, Call), "A2A requests come through `endpoint` only"
    return found


class CallContexts(ServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        return ServerCallContext(
            state={"headers": dict(request.headers), "agentledger": request.state.a2a_call}
        )


def a2a_error(err: AgentLedgerError) -> A2AError:
    if isinstance(err, NotFound):
        return TaskNotFoundError(message=str(err))
    if isinstance(err, InvalidInput):
        return InvalidParamsError(message=str(err))
    if isinstance(err, Refused):
        return InvalidRequestError(message=f"refused: {err}")
    return InvalidRequestError(message=str(err))


def deciding(params: Any) -> bool:
    """Whether a message's raw params carry a decision (an approver's act)."""
    message = params.get("message") if isinstance(params, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    return isinstance(parts, list) and any(
        isinstance(p, dict) and isinstance(p.get("data"), dict) and "decision" in p["data"]
        for p in parts
    )


class RunTasks(RequestHandler):
    """The A2A methods over `RunClient`: the run is the task."""

    # ------------------------------------------------------------ reading

    async def _context(self, call: Call, run_id: str) -> str:
        return await call.client.tasks.context_of(run_id) or run_id

    async def _task(self, call: Call, run_id: str) -> Task:
        client = call.client
        run = await client.runs.status(run_id)
        receipt = stored = None
        if is_terminal(run.status):
            receipt = (await client.runs.receipt(run_id)).model_dump(mode="json")
            stored = await client.tasks.artifacts(run_id)
        context = await self._context(call, run_id)
        return a2a_tasks.task_of(run, context, receipt=receipt, stored=stored)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        try:
            return await self._task(call_of(context), params.id)
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        raise UnsupportedOperationError(
            message="listing tasks is not offered here: GET /v1/runs lists the tenant's runs"
        )

    # ------------------------------------------------------------ the story

    async def _story(
        self,
        call: Call,
        run_id: str,
        seen: Position | None,
        *,
        until_input: bool,
        marker: Marker | None = None,
    ) -> AsyncIterator[Event]:
        """The task's events after event `seen` until it ends (or, `until_input`, until it
        asks for input), holding one of the credential's streams meanwhile. With `marker`,
        the story up to the item it names (what this request answered) is taken in
        silently: the caller has been told it."""
        client = call.client
        story = TaskStory(run_id, await self._context(call, run_id))
        streams = door_of(call.request).streams
        stream = streams.take(call.who)  # ends with the credential (a key revoked)
        items = client.runs.watch(run_id)
        try:
            async for item in streams.follow(stream, after(items, seen)):
                stored = await client.tasks.artifacts(run_id) if item.kind == "receipt" else []
                before = story.state
                told = list(story.tell(item, stored))
                if marker is not None:
                    marker = None if marker(item) else marker
                    continue
                for event in told:
                    yield event
                if story.ended:
                    return
                asks = story.state == task_states.INPUT_REQUIRED != before
                if until_input and asks:
                    return
        finally:
            await items.aclose()  # type: ignore[attr-defined]
            streams.give_back(stream)

    # ------------------------------------------------------------ messages

    async def _begin(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[str, Marker | None]:
        """Start the task or act on it: its id, and the item of its story up to which this
        caller has been told it (None: tell it from the start)."""
        call = call_of(context)
        message = params.message
        try:
            refuse_requested_tenant(params.tenant)
            if message.task_id:
                return await self._continue(call, message, message.task_id)
            session = await self._open_session(call, message)
            if session is not None:
                return await self._continue(call, message, session)
            return await self._start(call, params), None
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def _open_session(self, call: Call, message: Message) -> str | None:
        """The session run the message's context holds open, for an agent whose profile
        makes sessions: the message is its next turn (the same task). None: a new task."""
        if call.agent.session is None or not message.context_id:
            return None
        if a2a_tasks.decision_of(message) is not None:
            return None  # `_start` says a decision answers a task
        runs = await call.client.tasks.context_runs(message.context_id, call.agent.name)
        if not runs:
            return None
        latest = (await call.client.runs.inspect(runs[-1])).state
        return None if latest.status in TERMINAL else latest.run_id

    async def _start(self, call: Call, params: SendMessageRequest) -> str:
        message = params.message
        task = a2a_tasks.text_of(message)
        if not task:
            raise InvalidParamsError(
                message="a new task takes a message with a text part: the task"
            )
        if a2a_tasks.decision_of(message) is not None:
            raise InvalidParamsError(message="a decision answers a task: send it with its taskId")
        key = f"a2a.{message.message_id}"
        started = await start_agent(call.client, call.agent, task, call.who, key=key)
        run_id = started.run_id
        context_id = message.context_id or run_id
        await call.client.tasks.remember_context(run_id, context_id, call.agent.name)
        config = params.configuration
        if config.HasField("task_push_notification_config"):
            await self._subscribe(call, run_id, config.task_push_notification_config)
        return run_id

    async def _continue(self, call: Call, message: Message, run_id: str) -> tuple[str, Marker]:
        """Tell the run the message (a session's next turn), or decide its approval with it."""
        client = call.client
        decision = a2a_tasks.decision_of(message)
        if decision is None:
            text = a2a_tasks.text_of(message)
            if not text:
                raise InvalidParamsError(
                    message=f"a message to a task takes text; {a2a_tasks.REPLY_HELP}"
                )
            said = await client.runs.say(
                run_id, text, by=call.who.identity.name, message_id=message.message_id
            )
            return (
                run_id,
                lambda item: (
                    item.type == EventType.MESSAGE_RECEIVED
                    and item.data.get("message_id") == said.message_id
                ),
            )
        if not call.who.may("approver"):  # `endpoint` refused it already: never reached
            raise InvalidRequestError(message="forbidden: a decision needs the approver role")
        state = await client.runs.status(run_id)
        pending = state.pending_approval
        if pending is None:
            raise InvalidRequestError(message=f"refused: task {run_id} waits for no approval")
        if decision.get("approval_id") not in (None, pending.approval_id):
            raise InvalidRequestError(
                message=f"refused: approval {decision['approval_id']!r} is not pending; "
                f"{pending.approval_id!r} is"
            )
        common: dict[str, Any] = {
            "by": call.who.identity.name,
            "role": pending.required_role,
            "action_hash": decision.get("action_hash") or pending.action_hash,
        }
        if decision["decision"] == "reject":
            await client.runs.reject(run_id, reason=str(decision["reason"]), **common)
        else:
            await client.runs.approve(run_id, edit=decision.get("edit"), **common)
        step = pending.step_id
        return (
            run_id,
            lambda item: item.type == EventType.APPROVAL_REQUESTED and item.step_id == step,
        )

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """The task once it asks for input or ends (at once, with `returnImmediately`)."""
        call = call_of(context)
        run_id, marker = await self._begin(params, context)
        if not params.configuration.return_immediately:
            story = self._story(call, run_id, None, until_input=True, marker=marker)
            async for _event in story:
                pass
        try:
            return await self._task(call, run_id)
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task, then its events until it asks for input or ends."""
        call = call_of(context)
        run_id, marker = await self._begin(params, context)
        try:
            yield await self._task(call, run_id)
            story = self._story(call, run_id, None, until_input=True, marker=marker)
            async for event in story:
                yield event
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it stands, then its events until it ends: those after
        `Last-Event-ID` (the last `metadata.agentledger.seq` seen), exactly as the run's
        SSE stream resumes; without it, its story from the start."""
        call = call_of(context)
        try:
            seen = last_seen(call.request)
            yield await self._task(call, params.id)
            async for event in self._story(call, params.id, seen, until_input=False):
                yield event
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        call = call_of(context)
        try:
            run = await call.client.runs.status(params.id)
            if is_terminal(run.status):
                raise TaskNotCancelableError(
                    message=f"task {params.id} has ended ({run.status.value})"
                )
            await call.client.runs.cancel(params.id)
            for _ in range(50):  # the receipt is written as the run ends
                task = await self._task(call, params.id)
                if task.status.state != a2a_tasks.state(task_states.WORKING):
                    return task
                await asyncio.sleep(0.2)
            return task
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    # ------------------------------------------------------------ push notifications

    async def _subscribe(
        self, call: Call, run_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        name = config.id or "default"
        auth = config.authentication if config.HasField("authentication") else None
        await call.client.tasks.subscribe(
            run_id,
            name,
            url=config.url,
            secret=config.token,
            context_id=await self._context(call, run_id),
            auth_scheme=auth.scheme if auth and auth.credentials else None,
            auth_credentials=auth.credentials if auth and auth.credentials else None,
        )
        return TaskPushNotificationConfig(id=name, task_id=run_id, url=config.url)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        try:
            return await self._subscribe(call_of(context), params.task_id, params)
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def _configs(self, call: Call, run_id: str) -> list[TaskPushNotificationConfig]:
        rows = await call.client.tasks.subscriptions(run_id)
        return [TaskPushNotificationConfig(id=r.name, task_id=run_id, url=r.url) for r in rows]

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        try:
            configs = await self._configs(call_of(context), params.task_id)
        except AgentLedgerError as err:
            raise a2a_error(err) from err
        found = [c for c in configs if c.id == (params.id or "default")]
        if not found:
            raise InvalidParamsError(
                message=f"task {params.task_id} has no push config {params.id!r}"
            )
        return found[0]

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        try:
            configs = await self._configs(call_of(context), params.task_id)
        except AgentLedgerError as err:
            raise a2a_error(err) from err
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        try:
            await call_of(context).client.tasks.unsubscribe(params.task_id, params.id or "default")
        except AgentLedgerError as err:
            raise a2a_error(err) from err

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        call = call_of(context)
        return card_of(call.agent, base_url(call.request))


# ---------------------------------------------------------------- cards and routes


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def card_of(agent: Agent, base: str) -> AgentCard:
    """The agent's card: what it does (its instructions), its tools as skills, its
    endpoint, and the door's security scheme (a Bearer API key or OIDC token)."""
    tools = agent.tools or []
    skills = [
        AgentSkill(
            id=agent.name,
            name=agent.name,
            description=agent.instructions[:1000],
            tags=["agentledger", *tools],
        )
    ]
    return AgentCard(
        name=agent.name,
        description=agent.instructions[:1000],
        version=agent.profile_hash(),
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/a2a/{agent.name}", protocol_binding=BINDING, protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=True
        ),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer",
                    description="an agentledger API key (`keys create`) or an OIDC token",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": _no_scopes()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/markdown", "application/json"],
        skills=skills,
    )


def _no_scopes() -> Any:
    from a2a.types import StringList

    return StringList()


async def card(request: Request) -> Response:
    """An agent's card, for a caller whose tenant may run it (404 otherwise)."""
    who = await caller(request, need="viewer")
    client = runs_for(request, who)
    name = request.path_params.get("agent")
    agent = agent_named(client, name) if name else next(iter(agents_for(client).values()))
    return JSONResponse(agent_card_to_dict(card_of(agent, base_url(request))))


DISPATCHER = JsonRpcDispatcher(request_handler=RunTasks(), context_builder=CallContexts())


async def endpoint(request: Request) -> Response:
    """`POST /a2a/{agent}`: the caller first, then the method's role, then the SDK's
    dispatcher over `RunTasks`."""
    who = await caller(request, need="viewer")
    client = runs_for(request, who)
    agent = agent_named(client, str(request.path_params["agent"]))
    request = await read_whole(request, door_of(request).config)
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        body = None  # the dispatcher answers with JSON-RPC's parse error
    if isinstance(body, dict):
        method = str(body.get("method"))
        need = NEEDS.get(method, "viewer")
        if method in ("SendMessage", "SendStreamingMessage") and deciding(body.get("params")):
            need = "approver"
        if not who.may(need):
            have = ", ".join(sorted(who.roles)) or "no role"
            raise HttpRefusal(
                403, "forbidden", f"{method} needs the {need} role; this credential has {have}"
            )
    request.state.a2a_call = Call(who, client, agent, request)
    return await DISPATCHER.handle_requests(request)


def routes() -> list[Route]:
    return [
        Route(WELL_KNOWN, card, methods=["GET"]),
        Route("/a2a/{agent}" + WELL_KNOWN, card, methods=["GET"]),
        Route("/a2a/{agent}", endpoint, methods=["POST"]),
    ]
