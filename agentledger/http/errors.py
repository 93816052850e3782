"""What the HTTP door answers when it does not do what was asked: JSON, one shape.

`{"error": {"kind": ..., "message": ...}}`, the CLI's `--json` error without its exit code,
and the status the CLI's error class maps to: invalid input 400, no such run 404 (another
tenant's run alike, byte for byte), a refusal 409 (a spent budget 429 with Retry-After,
the seconds until it resets), an unreachable service 503. The door's
own refusals (no credential 401, a role 403, a body too large 413, a rate 429 with
Retry-After) are `HttpRefusal`s.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import psycopg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core.errors import (
    AgentLedgerError,
    BudgetExceeded,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    PolicyDenied,
    Refused,
    Unreachable,
)

log = logging.getLogger(__name__)

# First match wins, the most telling first: a tenant's policy denying the caller is 403, any
# other refusal 409.
STATUSES: tuple[tuple[type[AgentLedgerError], int], ...] = (
    (Unreachable, 503),
    (NotFound, 404),
    (InvalidInput, 400),
    (PolicyDenied, 403),
    (Refused, 409),
)


class HttpRefusal(Exception):
    """The door refuses the request itself: who is asking, what they may do, how much."""

    def __init__(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.headers = headers or {}


def unauthenticated(message: str) -> HttpRefusal:
    return HttpRefusal(401, "unauthenticated", message, {"WWW-Authenticate": "Bearer"})


def error_body(kind: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"kind": kind, "message": message}}


def status_of(err: AgentLedgerError) -> int:
    return next((status for kind, status in STATUSES if isinstance(err, kind)), 500)


async def refused(request: Request, err: Exception) -> Response:
    assert isinstance(err, HttpRefusal)
    return JSONResponse(error_body(err.kind, str(err)), err.status, headers=err.headers)


async def failed(request: Request, err: Exception) -> Response:
    assert isinstance(err, AgentLedgerError)
    body = error_body(err.kind, str(err))
    if isinstance(err, IdempotencyConflict):  # the run the key named first
        body["error"]["run_id"] = err.run_id
    if isinstance(err, BudgetExceeded):  # a spent budget: try again once it resets
        retry = str(err.retry_after(datetime.now(UTC)))
        return JSONResponse(body, 429, headers={"Retry-After": retry})
    return JSONResponse(body, status_of(err))


def dropped(err: Exception) -> bool:
    """Temporal or Postgres dropped the connection under the request (as the CLI reads it)."""
    if isinstance(err, RPCError):
        return err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
    return isinstance(err, psycopg.OperationalError)


async def broke(request: Request, err: Exception) -> Response:
    """A bug or a dropped connection: logged here, and no internals sent to the caller."""
    if dropped(err):
        message = f"a service did not answer ({type(err).__name__}); try again shortly"
        return JSONResponse(error_body("unreachable", message), 503)
    log.exception("%s %s failed", request.method, request.url.path, exc_info=err)
    return JSONResponse(
        error_body("failure", f"the server failed: {type(err).__name__}; see its log"), 500
    )


async def unrouted(request: Request, err: Exception) -> Response:
    """No route for the path (404) or the method (405), in the one shape of every refusal."""
    assert isinstance(err, HTTPException)
    if err.status_code == 405:
        kind, message = "not_allowed", f"{request.method} is not a method of {request.url.path}"
    elif err.status_code == 404:
        kind, message = "not_found", f"no route {request.url.path}: /docs lists them"
    else:
        kind, message = "invalid_input", str(err.detail)
    return JSONResponse(error_body(kind, message), err.status_code, headers=err.headers)


HANDLERS = {
    HttpRefusal: refused,
    AgentLedgerError: failed,
    HTTPException: unrouted,
    Exception: broke,
}
