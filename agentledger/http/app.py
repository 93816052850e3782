"""The HTTP door's ASGI application: the routes of every module that has some, CORS, the
body limit, and the error mapping (agentledger.http.errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentledger.client.run_client import RunClient
from agentledger.core.http_config import HttpConfig
from agentledger.http import (
    agui,
    events_api,
    inbox,
    notifications_api,
    openapi,
    runs_api,
    standing_api,
    triggers_api,
)
from agentledger.http.auth import Door
from agentledger.http.errors import HANDLERS, error_body
from agentledger.http.mcp_server import McpFace
from agentledger.http.request_body import too_large

# What a browser's MCP client sends besides (streamable HTTP's session, version and routing).
MCP_HEADERS = ["Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"]


class BodyLimit:
    """Refuse with 413, before reading it (or the credential), a body whose Content-Length
    is over the limit; `json_body` counts what it reads of one that does not say."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length", b"0")
            if not length.isdigit() or len(length) > 18 or int(length) > self.limit:
                refusal = too_large(self.limit)
                response = JSONResponse(error_body(refusal.kind, str(refusal)), refusal.status)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def health(request: Request) -> Response:
    """Whether the process answers (no credential needed; says nothing of any tenant)."""
    return JSONResponse({"ok": True})


def protocol_routes() -> list[BaseRoute]:
    """The agent protocols' faces whose packages are installed: A2A (the `a2a` extra)."""
    try:
        from agentledger.http import a2a_server
    except ImportError:  # the `a2a` extra is not installed: no A2A face
        return []
    return list(a2a_server.routes())


def create_app(
    runs: RunClient, settings: HttpConfig, *, routes: Sequence[BaseRoute] = ()
) -> Starlette:
    """The door over `runs` (an operator's RunClient: each request acts through its view
    of the caller's tenant), with the core routes and `routes` besides. Its lifespan holds
    what lives as long as the server: MCP's sessions."""
    door = Door.open(runs, settings)
    mcp = McpFace(settings.body_limit_bytes)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    app = Starlette(
        routes=[
            Route("/healthz", health),
            *runs_api.routes(),
            *triggers_api.routes(),
            *events_api.routes(),
            *openapi.routes(),
            *agui.routes(),
            *inbox.routes(),
            *standing_api.routes(),
            *notifications_api.routes(),
            *protocol_routes(),
            *mcp.routes(),
            *routes,
        ],
        lifespan=lifespan,
        middleware=[
            Middleware(
                CORSMiddleware,
                allow_origins=settings.origins(),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=[
                    "Authorization",
                    "Content-Type",
                    "Idempotency-Key",
                    "Last-Event-ID",
                    *MCP_HEADERS,
                ],
                expose_headers=["Mcp-Session-Id"],
            ),
            Middleware(BodyLimit, limit=settings.body_limit_bytes),
        ],
        exception_handlers=HANDLERS,  # type: ignore[arg-type]
    )
    app.state.door = door
    return app
