"""Standing approvals over REST: granted, listed and revoked by your tenant's approvers
(agentledger.client.standing), within what the tenant's policy lets them grant."""

from __future__ import annotations

from starlette.routing import Route

from agentledger.core.standing_approvals import StandingApproval
from agentledger.http import bodies
from agentledger.http.endpoints import Call, Endpoint, routes_of

RULES = "/v1/standing-approvals"


async def listed(call: Call[bodies.StandingQuery]) -> list[StandingApproval]:
    """Your tenant's standing approvals, newest first: those still approving, or (`all`)
    revoked and expired ones too."""
    return await call.runs.standing.listed(live_only=not call.input.all)


async def grant(call: Call[bodies.GrantStanding]) -> StandingApproval:
    """Grant a standing approval, as your credential's identity: the tool's calls that
    `when` holds of run without asking, for `hours` (403 beyond what your tenant's policy
    lets approvers grant: a tool it always asks about, longer than it allows)."""
    body = call.input
    return await call.runs.standing.grant(
        body.tool, hours=body.hours, when=body.when, run_id=body.run_id, agent=body.agent
    )


async def revoke(call: Call[bodies.NoFields]) -> StandingApproval:
    """Revoke a standing approval: the calls it covered ask a person again."""
    return await call.runs.standing.revoke(call.path("rule_id"))


ENDPOINTS = [
    Endpoint(
        "GET", RULES, listed, "viewer", query=bodies.StandingQuery, answer=list[StandingApproval]
    ),
    Endpoint(
        "POST",
        RULES,
        grant,
        "approver",
        bodies.GrantStanding,
        answer=StandingApproval,
        status=201,
    ),
    Endpoint(
        "POST",
        RULES + "/{rule_id}/revoke",
        revoke,
        "approver",
        bodies.NoFields,
        answer=StandingApproval,
    ),
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
