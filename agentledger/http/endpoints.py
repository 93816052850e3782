"""A route as the door serves it and describes it: the role it needs, the body (or query)
it takes as a model, and the answer it gives. Declared once, so the order every request
meets is written in one place, the same on every route:

1. the credential (401; 429 for an address that failed too often, or past the rate),
2. the role (403); where it depends on the body, one of the roles that could do,
3. the body, read within its bounds and validated by its model (400, 408, 413),
4. the role the body needs, where it depends on it (AG-UI: deciding is an approver's
   act, starting a runner's),
5. the handler, with a `Call` holding all of it.

`/openapi.json` and `/docs` are made from these declarations (agentledger.http.openapi).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentledger.client.run_client import RunClient
from agentledger.core import bounds
from agentledger.core.access import Caller
from agentledger.core.identity import Identity
from agentledger.http.auth import authenticate, door_of, require, runs_for
from agentledger.http.replies import answer
from agentledger.http.request_body import json_body, parsed

Input = TypeVar("Input")
# Path parameters, described once for every route that has them.
PATH_PARAMETERS = {
    "run_id": "a run of your tenant (another tenant's reads exactly as a missing one)",
    "agent": "an agent profile's name (AGENTLEDGER_AGENTS)",
    "rule_id": "a standing approval of your tenant (another tenant's reads as a missing one)",
    "name": "a schedule's, a hook's or a notification webhook's name in your tenant (another "
    "tenant's reads as missing)",
    "address": "a hook's address, TENANT.NAME, as `hooks create` answered it",
    "delivery_id": "a delivery to that webhook, as its deliveries list it, URL-encoded",
}


@dataclass(frozen=True)
class Call(Generic[Input]):
    """One authenticated request, as a handler gets it."""

    request: Request
    who: Caller
    input: Input  # the validated body, or query; None for a route with neither

    def path(self, name: str) -> str:
        return str(self.request.path_params[name])

    @property
    def runs(self) -> RunClient:
        """The client acting for the caller's tenant alone."""
        return runs_for(self.request, self.who)


Handler = Callable[[Call[Any]], Awaitable[Any]]


@dataclass(frozen=True)
class RoleOfBody:
    """A role that depends on the body: one of `any_of` is needed before the body is read,
    and the one `of(body)` names after."""

    any_of: tuple[str, ...]
    of: Callable[[Any], str]

    def __str__(self) -> str:
        return " or ".join(self.any_of) + ", as the body asks"


@dataclass(frozen=True)
class Signed:
    """No credential: the request's signature proves it, and the handler checks it (a
    webhook's delivery); its caller is nobody, whose client view acts for no tenant."""

    def __str__(self) -> str:
        return "none: no credential, the request's signature proves it"


SIGNED = Signed()
# The caller of a signed route: no role, and a tenant no view can act for.
NOBODY = Caller(
    tenant="",
    roles=frozenset(),
    identity=Identity(kind="hook", id="unverified", name="nobody"),
    credential="nobody",
)


@dataclass(frozen=True)
class Endpoint:
    method: Literal["GET", "POST", "PUT"]
    path: str
    handler: Handler
    role: str | RoleOfBody | Signed
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    answer: Any = None  # the answer's type, for its description
    status: int = 200
    # Other successful statuses, and what each means.
    statuses: dict[int, str] = field(default_factory=dict)
    events: str | None = None  # a text/event-stream answer: what its events are
    headers: dict[str, str] = field(default_factory=dict)  # request headers it reads

    @property
    def summary(self) -> str:
        doc = (self.handler.__doc__ or "").strip()
        return " ".join(doc.split("\n\n")[0].split())

    @property
    def description(self) -> str:
        doc = (self.handler.__doc__ or "").strip()
        return " ".join(doc.split())

    async def serve(self, request: Request) -> Response:
        if isinstance(self.role, Signed):
            signed = await self.handler(Call(request, NOBODY, None))
            return signed if isinstance(signed, Response) else answer(signed, self.status)
        who = await authenticate(request)
        for name, value in request.path_params.items():
            bounds.check_text(name, str(value))  # a run id past its bound: 400 on every route
        if isinstance(self.role, str):
            require(who, self.role)
        elif not any(who.may(role) for role in self.role.any_of):
            require(who, " or ".join(self.role.any_of))
        given: Any = None
        if self.body is not None:
            settings = door_of(request).config
            given = parsed(await json_body(request, settings), self.body)
        elif self.query is not None:
            given = parsed(dict(request.query_params), self.query)
        if isinstance(self.role, RoleOfBody):
            require(who, self.role.of(given))
        result = await self.handler(Call(request, who, given))
        return result if isinstance(result, Response) else answer(result, self.status)


class EndpointRoute(Route):
    """A Starlette route that keeps its declaration, for the API's description."""

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint.path, endpoint.serve, methods=[endpoint.method])
        self.declared = endpoint


def routes_of(endpoints: list[Endpoint]) -> list[Route]:
    return [EndpointRoute(endpoint) for endpoint in endpoints]
