"""The API's description, made from the routes themselves (so it cannot drift from them):
OpenAPI 3.1 JSON at /openapi.json and a plain page at /docs that lists it, with no script
from a CDN (the door may run where there is no internet)."""

from __future__ import annotations

import html
import inspect
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

ERRORS = {
    "400": "invalid input",
    "401": "no valid credential",
    "403": "the credential's role may not",
    "404": "no such run (another tenant's reads the same)",
    "409": "refused by the run or its policy",
    "413": "body too large",
    "429": "over a limit; see Retry-After",
    "503": "Temporal or Postgres did not answer",
}


def described(routes: list[BaseRoute]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route) or not route.path.startswith("/v1"):
            continue
        doc = inspect.getdoc(route.endpoint) or ""
        for method in sorted((route.methods or set()) - {"HEAD"}):
            params = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in re.findall(r"{(\w+)}", route.path)
            ]
            paths.setdefault(route.path, {})[method.lower()] = {
                "summary": route.path.rsplit("/", 1)[-1] if not doc else doc.split("\n\n")[0],
                "parameters": params,
                "security": [{"bearer": []}],
                "responses": {"200": {"description": "JSON"}}
                | {code: {"description": text} for code, text in ERRORS.items()},
            }
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentledger", "version": "1", "description": "docs/http.md"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }


async def openapi_json(request: Request) -> Response:
    return JSONResponse(described(request.app.routes))


async def docs_page(request: Request) -> Response:
    spec = described(request.app.routes)
    rows = "".join(
        f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
        f"<td>{html.escape(op['summary'])}</td></tr>"
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    )
    page = (
        "<!doctype html><meta charset=utf-8><meta name=viewport "
        "content='width=device-width'><title>agentledger API</title>"
        "<h1>agentledger API</h1><p>Send <code>Authorization: Bearer KEY</code>. "
        "Machine-readable: <a href=/openapi.json>/openapi.json</a>.</p>"
        f"<table border=1 cellpadding=4>{rows}</table>"
    )
    return HTMLResponse(page)


def routes() -> list[Route]:
    return [Route("/openapi.json", openapi_json), Route("/docs", docs_page)]
