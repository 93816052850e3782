"""The approvals inbox and the run inspector: one page for the people who decide and
those who follow runs, and the lists it shows.

`GET /inbox` is one HTML page (vanilla JS, no build step, nothing fetched from elsewhere)
made of two files beside this module, one a view: `inbox.html`, the approvals, with the
inspector (`inspector.html`: runs, a run's timeline, its receipt, forks, cost per day) put
in at its `<!-- inspector -->` mark. It asks for an API key, keeps it in the tab's
sessionStorage, and acts only through the REST routes with it: `GET /v1/me` (who is signed
in, for which tenant), `GET /v1/approvals` (below) lists what the key's tenant's runs wait
for, `POST /v1/runs/{id}/approve` and `/reject` decide (as the key's identity),
`GET /v1/runs/{id}/events` is each run's live timeline, and the inspector reads `/v1/runs`,
`/v1/runs/{id}/steps`, `/v1/costs` and forks with `/v1/runs/{id}/fork`. The page itself
holds nothing of any tenant, so it is served without a credential.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from agentledger.core.listings import InboxItem
from agentledger.http.bodies import ApprovalsQuery, SignedIn
from agentledger.http.endpoints import Call, Endpoint, routes_of

INSPECTOR_MARK = "<!-- inspector -->"


def page_text() -> str:
    """The page: the inbox's file, with the inspector's where the inbox marks its place."""
    files = resources.files("agentledger.http")
    inbox = files.joinpath("inbox.html").read_text(encoding="utf-8")
    inspector = files.joinpath("inspector.html").read_text(encoding="utf-8")
    return inbox.replace(INSPECTOR_MARK, inspector, 1)


def inline_hashes(page: str, tag: str) -> str:
    """CSP sources for exactly the page's own inline `<tag>` blocks, by their sha256."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    digests = (hashlib.sha256(block.encode()).digest() for block in blocks)
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


def page_policy(page: str) -> str:
    """The page runs its own script and styles, nothing else, and reaches only this server:
    markup that slipped into it could run nothing."""
    return (
        f"default-src 'none'; script-src {inline_hashes(page, 'script')}; "
        f"style-src {inline_hashes(page, 'style')}; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    )


async def page(request: Request) -> Response:
    text = page_text()
    return HTMLResponse(
        text, headers={"Content-Security-Policy": page_policy(text), "Cache-Control": "no-store"}
    )


async def approvals(call: Call[ApprovalsQuery]) -> list[InboxItem]:
    """The approvals your tenant's runs wait for, newest first.

    Each with its run, whom the run is for, its task, and the approval: tool, arguments,
    risk, role, expiry, action hash."""
    return await call.runs.runs.pending_approvals(limit=call.input.limit)


async def signed_in(call: Call[None]) -> SignedIn:
    """Who you are, as your credential proves it, and your tenant (the inbox's header)."""
    who = call.who
    return SignedIn(
        identity=who.identity,
        tenant=who.tenant,
        roles=sorted(who.roles),
        expires_at=who.expires_at,
    )


ENDPOINTS = [
    Endpoint("GET", "/v1/me", signed_in, "viewer", answer=SignedIn),
    Endpoint(
        "GET",
        "/v1/approvals",
        approvals,
        "viewer",
        query=ApprovalsQuery,
        answer=list[InboxItem],
    ),
]


def routes() -> list[Route]:
    return [Route("/inbox", page, methods=["GET"]), *routes_of(ENDPOINTS)]
