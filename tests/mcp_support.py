"""The official `mcp` client as callers of `/mcp` use it: over streamable HTTP with a Bearer
credential, and, for a client that speaks the Tasks extension (`io.modelcontextprotocol/
tasks`, which the SDK leaves to extensions), the requester side of that extension written
with the SDK's own extension hooks, as the extension's specification says a requester
behaves: poll `tasks/get` at the interval asked, answer `inputRequests` through the
client's own elicitation callback with `tasks/update`, and finish with the task's result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(types.InputRequest)


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class TaskParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(TaskParams):
    input_responses: dict[str, Any]


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class UpdateTask(types.Request[TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: TaskUpdateParams
    name_param = "taskId"


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


class DetailedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Tasks(ClientExtension):
    """The Tasks extension's requester. `seen` keeps every polled state, in order."""

    identifier = TASKS

    def __init__(self) -> None:
        self.seen: list[DetailedTask] = []
        self.created: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        session, task_id = ctx.session, created.task_id
        self.created.append(task_id)
        answered: set[str] = set()
        interval = (created.poll_interval_ms or 1000) / 1000
        while True:
            await asyncio.sleep(interval)
            asking = GetTask(params=TaskParams(task_id=task_id))
            task = await session.send_request(asking, DetailedTask)
            self.seen.append(task)
            interval = (task.poll_interval_ms or 1000) / 1000
            if task.status == "completed":
                assert task.result is not None
                return types.CallToolResult.model_validate(task.result)
            if task.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {task_id} {task.status}: {task.status_message}")
            if task.status != "input_required" or not task.input_requests:
                continue
            responses: dict[str, Any] = {}
            for key, raw in task.input_requests.items():
                if key in answered:  # the spec: the same request again is not asked twice
                    continue
                request = INPUT_REQUEST.validate_python(raw)
                context = ClientRequestContext(session=session, request_id=key, meta=None)
                answer = await session.dispatch_input_request(context, request)
                responses[key] = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
                answered.add(key)
            if responses:
                update = UpdateTask(
                    params=TaskUpdateParams(task_id=task_id, input_responses=responses)
                )
                await session.send_request(update, types.EmptyResult)


@asynccontextmanager
async def mcp_client(url: str, key: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's `Client` on `URL/mcp` with the key as its Bearer credential."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), **options) as c:
        yield c


def accept(**content: Any) -> Any:
    """An elicitation callback that answers every form with `content`; the forms it was
    shown are kept on it (`.asked`)."""
    asked: list[types.ElicitRequestFormParams] = []

    async def answer(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content=content)

    answer.asked = asked  # type: ignore[attr-defined]
    return answer


def said(result: types.CallToolResult) -> str:
    """The tool result's text."""
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def read_text(read: types.ReadResourceResult) -> str:
    return "\n".join(c.text for c in read.contents if isinstance(c, types.TextResourceContents))
