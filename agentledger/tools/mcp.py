"""MCP servers as tool sources (`agentledger-worker --mcp NAME=COMMAND ARGS...` or `NAME=https://...`).

Each server's tools are listed when the worker starts and offered to the model as
`NAME__TOOL` (OpenAI function names allow no dots). A call is an ordinary `Tool`, so it goes
through `tool.invoke` like any other: ledger, approvals, unknown outcomes. The server's
annotations set the policy, and missing ones read the cautious way, as the MCP spec says:

- `readOnlyHint` true: no side effect, no approval, retried freely.
- otherwise a side effect, outside our transaction (claimed in the ledger before acting):
  `destructiveHint` (true unless said otherwise) makes it high risk, so it waits for approval;
  a non-destructive one is medium risk.
- `idempotentHint` true: after a crash mid-call it is simply called again; otherwise the
  outcome is unknown and a person decides. `openWorldHint` (true unless said otherwise) only
  adds to the description: either way an effect we cannot see into is claimed first.

A server that dies is started again on the next call. A call in flight when it died fails its
attempt; for a side-effecting tool the retry finds the claim and reports an unknown outcome
instead of calling again blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import jsonschema
import mcp_types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict, model_validator

from agentledger.core.errors import McpSetupError
from agentledger.core.spec import JsonDict, RiskLevel
from agentledger.tools.mcp_servers import SEPARATOR, McpServerSpec
from agentledger.tools.registry import Reconciled, Tool, ToolContext, ToolError

START_SECONDS = 30.0
PING_SECONDS = 5.0


class McpServerDied(Exception):
    """The server went away while a call was in flight: the call may or may not have run."""


class JsonSchemaArguments(BaseModel):
    """Arguments checked against a JSON schema the server declared, not a pydantic model."""

    model_config = ConfigDict(extra="allow")
    input_schema: ClassVar[JsonDict] = {}

    @model_validator(mode="before")
    @classmethod
    def _conforms(cls, data: Any) -> Any:
        try:
            jsonschema.validate(data, cls.input_schema)
        except jsonschema.ValidationError as err:
            path = ".".join(str(p) for p in err.absolute_path) or "(root)"
            raise ValueError(f"{path}: {err.message}") from None
        return data


class McpConnection:
    """One live session with one server, held by a background task, restarted when it dies."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self._session: ClientSession | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self.restarts = 0

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        if self.spec.url:
            return streamable_http_client(self.spec.url)
        command, *args = self.spec.command
        # The server gets the worker's environment, as a command started from its shell would.
        params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
        return stdio_client(params)

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with self._transport() as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    ready.set_result(session)
                    await self._stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err)
            if not isinstance(err, Exception):
                raise

    async def session(self) -> ClientSession:
        """The live session; a dead one (it does not answer a ping) is replaced first."""
        async with self._lock:
            if self._session is not None:
                try:
                    await asyncio.wait_for(self._session.send_ping(), PING_SECONDS)
                    return self._session
                except Exception:
                    self.restarts += 1
                    await self._drop()
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(ready))
            try:
                self._session = await asyncio.wait_for(ready, START_SECONDS)
            except Exception as err:
                await self._drop()
                raise McpSetupError(
                    f"MCP server {self.spec.name!r} did not start: {type(err).__name__}: {err}"
                ) from err
            return self._session

    async def _drop(self) -> None:
        self._session = None
        self._stop.set()
        if self._holder is not None:
            holder, self._holder = self._holder, None
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(holder, 10)

    async def list_tools(self) -> list[mcp_types.Tool]:
        session = await self.session()
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(
                params=mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                return listed

    async def call(self, tool: str, arguments: JsonDict) -> Any:
        session = await self.session()
        try:
            result = await session.call_tool(tool, arguments)
        except Exception as err:
            if "connection closed" in str(err).lower():
                raise McpServerDied(
                    f"MCP server {self.spec.name!r} died during {tool}; it is restarted on "
                    "the next call"
                ) from err
            raise
        return _output(tool, result)

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    def tools(self, listed: list[mcp_types.Tool]) -> list[Tool]:
        return [self._as_tool(t) for t in listed]

    def _as_tool(self, listed: mcp_types.Tool) -> Tool:
        hints = listed.annotations or mcp_types.ToolAnnotations()
        read_only = hints.read_only_hint is True
        destructive = hints.destructive_hint is not False
        idempotent = hints.idempotent_hint is True
        open_world = hints.open_world_hint is not False
        schema = listed.input_schema or {"type": "object", "properties": {}}
        model = type(
            f"{self.spec.name}_{listed.name}_arguments",
            (JsonSchemaArguments,),
            {"input_schema": schema, "__module__": __name__},
        )
        connection, remote = self, listed.name

        async def call(args: BaseModel, ctx: ToolContext) -> Any:
            return await connection.call(remote, args.model_dump(mode="json"))

        async def repeat(args: BaseModel, ctx: ToolContext) -> Reconciled:
            return Reconciled(happened=False, by="idempotentHint: safe to call again")

        notes = [] if read_only or not open_world else ["Acts on the outside world."]
        description = " ".join([listed.description or f"{listed.name} ({self.spec.name})", *notes])
        return Tool(
            name=f"{self.spec.name}{SEPARATOR}{listed.name}",
            description=description,
            args_model=model,
            fn=call,
            side_effect=not read_only,
            risk=RiskLevel.LOW
            if read_only
            else (RiskLevel.HIGH if destructive else RiskLevel.MEDIUM),
            transactional=read_only,
            reconcile=repeat if idempotent and not read_only else None,
            input_schema=schema,
            title=listed.title or hints.title,
        )


def _output(tool: str, result: mcp_types.CallToolResult) -> Any:
    texts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
    if result.is_error:
        raise ToolError(f"{tool} failed: {' '.join(texts) or 'no detail given'}")
    if result.structured_content is not None:
        return result.structured_content
    if len(texts) == 1:
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(texts[0])
    return {"content": texts}


@contextlib.asynccontextmanager
async def mcp_tools(specs: list[McpServerSpec]) -> AsyncIterator[list[tuple[str, list[Tool]]]]:
    """Start every server, list its tools, and keep the sessions for the block."""
    connections = [McpConnection(spec) for spec in specs]
    try:
        sources = []
        for connection in connections:
            try:
                listed = await connection.list_tools()
            except McpSetupError:
                raise
            except Exception as err:
                raise McpSetupError(
                    f"MCP server {connection.spec.name!r} did not list its tools: "
                    f"{type(err).__name__}: {err}"
                ) from err
            sources.append((f"MCP server {connection.spec.name!r}", connection.tools(listed)))
        yield sources
    finally:
        for connection in connections:
            await connection.close()
