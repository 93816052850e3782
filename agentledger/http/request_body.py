"""Reading a request's body, bounded: its size (413), the time it takes to arrive (408),
how deeply it nests and how long its numbers are (400), before any of it is parsed; then
its model, which refuses it naming each field (400).

Read only after the credential is checked, so a caller with none learns nothing of the
body's shape and costs the door no parse.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.types import Message

from agentledger.core.http_config import HttpConfig
from agentledger.http.errors import HttpRefusal

Model = TypeVar("Model", bound=BaseModel)

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
_OPENS = frozenset(b"[{")


def too_large(limit: int) -> HttpRefusal:
    return HttpRefusal(
        413,
        "too_large",
        f"the request body is over {limit} bytes (AGENTLEDGER_HTTP_BODY_LIMIT_BYTES)",
    )


def invalid(message: str) -> HttpRefusal:
    return HttpRefusal(400, "invalid_input", message)


def nesting(raw: bytes, most: int) -> int:
    """How deeply `raw` nests objects and lists (strings passed over), counted up to one
    past `most`."""
    level = deepest = 0
    for bracket in _BRACKETS.finditer(_STRING.sub(b'""', raw)):
        level += 1 if bracket.group()[0] in _OPENS else -1
        if level > deepest:
            deepest = level
            if deepest > most:
                break
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def raw_body(request: Request, settings: HttpConfig) -> bytes:
    """The body's bytes, up to the size limit and within the body timeout."""
    limit = settings.body_limit_bytes
    body = bytearray()
    try:
        async with asyncio.timeout(settings.body_timeout_seconds):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise too_large(limit)
    except TimeoutError as err:
        raise HttpRefusal(
            408,
            "timeout",
            f"the request body did not arrive within {settings.body_timeout_seconds:g} s "
            "(AGENTLEDGER_HTTP_BODY_TIMEOUT_SECONDS)",
        ) from err
    return bytes(body)


async def read_whole(request: Request, settings: HttpConfig) -> Request:
    """The request with its body read within the bounds (413, 408), for a protocol SDK that
    reads the body itself: its receive hands the body over, then what the client sends
    after (a disconnect)."""
    body = await raw_body(request, settings)
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            return await request.receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


async def json_body(request: Request, settings: HttpConfig) -> Any:
    """The body as JSON, bounded (an empty body is an empty object)."""
    raw = await raw_body(request, settings)
    if not raw.strip():
        return {}
    if nesting(raw, settings.json_depth) > settings.json_depth:
        raise invalid(
            f"the body nests objects and lists deeper than {settings.json_depth} levels "
            "(AGENTLEDGER_HTTP_JSON_DEPTH)"
        )
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise invalid(f"the body is not JSON: {err}") from err
    except UnicodeDecodeError as err:
        raise invalid(f"the body is not UTF-8 JSON: {err.reason}") from err
    except (ValueError, RecursionError) as err:
        # A number longer than Python reads (4,300 digits), NaN or Infinity.
        raise invalid(f"the body is not JSON this server reads: {err}") from err


def refusal(err: ValidationError, model: type[BaseModel]) -> HttpRefusal:
    """400 naming each field the model refused and why."""
    takes = ", ".join(model.model_fields) or "no field"
    problems: list[str] = []
    for error in err.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "the body"
        if error["type"] == "extra_forbidden":
            why = " (the tenant is your credential's)" if where == "tenant" else ""
            problems.append(f"{where}: not a field of this route{why}; it takes {takes}")
        elif error["type"] == "missing":
            problems.append(f"{where}: missing")
        elif error["type"] == "model_type" and where == "the body":
            problems.append(f"the body must be a JSON object with the fields {takes}")
        else:
            problems.append(f"{where}: {error['msg']}")
    return invalid("; ".join(problems[:10]))


def parsed(value: Any, model: type[Model]) -> Model:
    """`value` as `model`, or 400 naming what it refused."""
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise refusal(err, model) from err
