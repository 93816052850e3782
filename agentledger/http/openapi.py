"""The API's description, made from the routes' declarations (agentledger.http.endpoints)
and their models, so it names every field they take and give and cannot drift from them:
OpenAPI 3.1 JSON at /openapi.json and a plain page at /docs made from it, with no script
from a CDN (the door may run where there is no internet)."""

from __future__ import annotations

import html
import re
from typing import Any

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentledger.http.bodies import ErrorBody
from agentledger.http.endpoints import PATH_PARAMETERS, Endpoint, EndpointRoute, Signed

REF = "#/components/schemas/{model}"
ERRORS = {
    "400": "invalid input: a body, field, parameter or Last-Event-ID the route does not take",
    "401": "no valid credential",
    "403": "the credential's role may not",
    "404": "no such run (another tenant's, or an id that is not a run, reads the same)",
    "408": "the request's body did not arrive in time",
    "409": "refused by the run or its policy (ended, nothing pending, a cap, a signature)",
    "413": "body too large",
    "429": "over a limit; see Retry-After",
    "503": "Temporal or Postgres did not answer",
}


def _schema_inputs(endpoints: list[Endpoint]) -> list[tuple[Any, Any, TypeAdapter[Any]]]:
    inputs: list[tuple[Any, Any, TypeAdapter[Any]]] = [
        ("error", "serialization", TypeAdapter(ErrorBody))
    ]
    for each in endpoints:
        if each.body is not None:
            inputs.append(((each.method, each.path, "body"), "validation", TypeAdapter(each.body)))
        if each.answer is not None:
            key = (each.method, each.path, "answer")
            inputs.append((key, "serialization", TypeAdapter(each.answer)))
    return inputs


def _parameters(each: Endpoint) -> list[dict[str, Any]]:
    found = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMETERS[name],
            "schema": {"type": "string"},
        }
        for name in re.findall(r"{(\w+)}", each.path)
    ]
    if each.query is not None:
        schema = each.query.model_json_schema()
        required = set(schema.get("required", []))
        found += [
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": field.get("description", ""),
                "schema": {k: v for k, v in field.items() if k != "description"},
            }
            for name, field in schema.get("properties", {}).items()
        ]
    found += [
        {"name": name, "in": "header", "description": text, "schema": {"type": "string"}}
        for name, text in each.headers.items()
    ]
    return found


def _answers(each: Endpoint, schema: dict[str, Any] | None, error: Any) -> dict[str, Any]:
    media = "text/event-stream" if each.events else "application/json"
    statuses = each.statuses or {each.status: each.events or "done"}
    answers: dict[str, Any] = {}
    for status, text in statuses.items():
        answers[str(status)] = {"description": text}
        if schema is not None:
            answers[str(status)]["content"] = {media: {"schema": schema}}
    for code, text in ERRORS.items():
        answers[code] = {"description": text, "content": {"application/json": {"schema": error}}}
    return answers


def described(routes: list[BaseRoute]) -> dict[str, Any]:
    endpoints = [route.declared for route in routes if isinstance(route, EndpointRoute)]
    refs, definitions = TypeAdapter.json_schemas(_schema_inputs(endpoints), ref_template=REF)
    error = refs[("error", "serialization")]
    paths: dict[str, dict[str, Any]] = {}
    for each in endpoints:
        role = str(each.role)
        operation: dict[str, Any] = {
            "summary": each.summary,
            "description": f"{each.description}\n\nRole: {role}.",
            "parameters": _parameters(each),
            "security": [] if isinstance(each.role, Signed) else [{"bearer": []}],
            "responses": _answers(
                each, refs.get(((each.method, each.path, "answer"), "serialization")), error
            ),
        }
        if each.body is not None:
            body = refs[((each.method, each.path, "body"), "validation")]
            required = any(field.is_required() for field in each.body.model_fields.values())
            operation["requestBody"] = {
                "required": required,
                "content": {"application/json": {"schema": body}},
            }
        paths.setdefault(each.path, {})[each.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentledger",
            "version": "1",
            "description": "Durable runs for AI agents over HTTP (docs/http.md). Send "
            "`Authorization: Bearer KEY` (an API key or an OIDC token); it decides the tenant.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": definitions.get("$defs", {}),
        },
        "paths": paths,
    }


async def openapi_json(request: Request) -> Response:
    return JSONResponse(described(request.app.routes))


def _type(schema: dict[str, Any]) -> str:
    """A schema's type, for people: a model's name links to its table."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"<a href='#{html.escape(name)}'>{html.escape(name)}</a>"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(_type(part) for part in schema.get("anyOf", schema.get("oneOf", [])))
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(html.escape(repr(v)) for v in schema["enum"])
    if "const" in schema:
        return html.escape(repr(schema["const"]))
    return html.escape(str(schema.get("type", "any JSON")))


def _fields(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = "".join(
        f"<tr><td><code>{html.escape(name)}</code>{' (required)' if name in required else ''}"
        f"</td><td>{_type(field)}</td><td>{html.escape(field.get('description', ''))}</td></tr>"
        for name, field in schema.get("properties", {}).items()
    )
    return f"<table>{rows}</table>" if rows else "<p>no fields</p>"


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    parts = [
        f"<h3><code>{method.upper()} {html.escape(path)}</code></h3>",
        f"<p>{html.escape(op['description'])}</p>",
    ]
    if op["parameters"]:
        rows = "".join(
            f"<tr><td><code>{html.escape(p['name'])}</code> ({p['in']})</td>"
            f"<td>{html.escape(p.get('description', ''))}</td></tr>"
            for p in op["parameters"]
        )
        parts.append(f"<p>Parameters</p><table>{rows}</table>")
    if "requestBody" in op:
        body = op["requestBody"]["content"]["application/json"]["schema"]
        parts.append(f"<p>Body: {_type(body)}</p>")
    for status, answer in op["responses"].items():
        if status.startswith("2"):
            media: dict[str, Any] = next(iter(answer.get("content", {}).values()), {})
            schema = media.get("schema")
            shown = f": {_type(schema)}" if schema else ""
            parts.append(f"<p>{status} {html.escape(answer['description'])}{shown}</p>")
    return "".join(parts)


async def docs_page(request: Request) -> Response:
    spec = described(request.app.routes)
    operations = "".join(
        _operation(path, method, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    )
    schemas = "".join(
        f"<h3 id='{html.escape(name)}'>{html.escape(name)}</h3>"
        f"<p>{html.escape(schema.get('description', ''))}</p>{_fields(schema)}"
        for name, schema in sorted(spec["components"]["schemas"].items())
    )
    errors = "".join(
        f"<tr><td>{code}</td><td>{html.escape(text)}</td></tr>" for code, text in ERRORS.items()
    )
    page = (
        "<!doctype html><meta charset=utf-8><meta name=viewport "
        "content='width=device-width'><title>agentledger API</title>"
        "<style>table{border-collapse:collapse}td{border:1px solid #999;padding:4px;"
        "vertical-align:top}</style>"
        "<h1>agentledger API</h1><p>Send <code>Authorization: Bearer KEY</code>; the "
        "credential decides the tenant. Refusals are <a href='#ErrorBody'>ErrorBody</a>. "
        "Machine-readable: <a href=/openapi.json>/openapi.json</a>.</p>"
        f"<h2>Routes</h2>{operations}<h2>Refusals</h2><table>{errors}</table>"
        f"<h2>Bodies and answers</h2>{schemas}"
    )
    return HTMLResponse(page)


def routes() -> list[Route]:
    return [Route("/openapi.json", openapi_json), Route("/docs", docs_page)]
