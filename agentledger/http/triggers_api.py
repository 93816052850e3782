"""REST for runs that start themselves and for spend: a tenant's
schedules, its webhook triggers and the deliveries they take, its budgets and its costs.
Each route is one RunClient call on the view of the caller's tenant, declared as every
route is (agentledger.http.endpoints); a hook's delivery alone carries no credential:
its signature is its proof, and a bad one is 401 and starts nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, Field
from starlette.responses import Response
from starlette.routing import Route

from agentledger.core.budgets import BudgetStatus, Mode, Period
from agentledger.core.errors import UnverifiedDelivery
from agentledger.core.hook_models import HookRow, HookStarted, NewHook
from agentledger.core.listings import CostRow
from agentledger.core.schedule_models import Overlap, ScheduleRow, ScheduleView
from agentledger.http.auth import client_address, door_of
from agentledger.http.bodies import Body, Name, NoFields, TaskText
from agentledger.http.endpoints import SIGNED, Call, Endpoint, routes_of
from agentledger.http.errors import unauthenticated
from agentledger.http.replies import answer
from agentledger.http.request_body import raw_body

SCHEDULE = "/v1/schedules/{name}"


class MakeSchedule(Body):
    """A schedule of your tenant: when it fires (`cron` or `every_seconds`), and the run
    each fire starts."""

    name: Name = Field(description="its name in your tenant: letters, digits, - and _")
    task: TaskText = Field(description="what each fire's run is asked to do")
    agent: Name | None = Field(None, description="the agent profile each fire runs")
    cron: Name | None = Field(None, description="a cron expression, e.g. 0 9 * * MON")
    every_seconds: float | None = Field(None, ge=1, description="or: every so many seconds")
    overlap: Overlap = Field("skip", description="what a fire does while a run is busy")
    catchup_seconds: float | None = Field(
        None, gt=0, description="how late a fire missed while the server was down may run"
    )
    jitter_seconds: float | None = Field(None, ge=0, description="each fire up to this late")
    paused: bool = Field(False, description="made paused: no fire until resumed")


class MakeHook(Body):
    """A webhook trigger of your tenant: each signed delivery starts a run."""

    name: Name = Field(description="its name in your tenant: letters, digits, - and _")
    task: TaskText = Field(description="the task, with {body.path} filled in from each delivery")
    agent: Name | None = Field(None, description="the agent profile each delivery runs")
    secret: Name | None = Field(
        None, min_length=16, description="its signing secret; none: one is made and answered once"
    )


class SetBudget(Body):
    """One of your tenant's budgets, changed: its limits (null removes one) and its mode."""

    period: Period = Field(description="day or month (UTC)")
    usd: float | None = Field(None, gt=0, description="dollars per period")
    tokens: int | None = Field(None, gt=0, description="tokens per period")
    mode: Mode | None = Field(None, description="advisory (warns) or enforcing (also refuses)")
    subject: str = Field(
        "", max_length=500, description="one credential's budget (key:ID, ...); '': the tenant's"
    )


class CostsQuery(Body):
    """What to sum, and since when."""

    by: str = Field("", description="comma-separated: tenant, agent, model, key, day")
    since_hours: float = Field(24 * 7, gt=0, description="the last so many hours")


class Deleted(BaseModel):
    outcome: str = Field(description="what was removed, and what goes on")


async def list_schedules(call: Call[None]) -> list[ScheduleRow]:
    """Your tenant's schedules, each with its last fire."""
    return await call.runs.schedules.listed()


async def make_schedule(call: Call[MakeSchedule]) -> ScheduleView:
    """Make a schedule: each fire starts a run under your tenant's policy.

    Who may is your tenant's policy's (admins, or runners too); 409 if the name is taken."""
    body = call.input
    return await call.runs.schedules.create(
        body.name,
        task=body.task,
        agent=body.agent,
        cron=body.cron,
        every=body.every_seconds,
        overlap=body.overlap,
        catchup=body.catchup_seconds,
        jitter=body.jitter_seconds,
        paused=body.paused,
    )


async def show_schedule(call: Call[None]) -> ScheduleView:
    """The schedule: its settings, next fires, fires skipped while a run was busy, and its
    latest fires with their runs."""
    return await call.runs.schedules.show(call.path("name"))


async def pause_schedule(call: Call[NoFields]) -> ScheduleView:
    """Pause the schedule: no fire until resumed."""
    return await call.runs.schedules.pause(call.path("name"))


async def resume_schedule(call: Call[NoFields]) -> ScheduleView:
    """Resume the schedule."""
    return await call.runs.schedules.resume(call.path("name"))


async def trigger_schedule(call: Call[NoFields]) -> ScheduleView:
    """Fire the schedule now, once (as its overlap policy allows)."""
    return await call.runs.schedules.trigger(call.path("name"))


async def delete_schedule(call: Call[NoFields]) -> Deleted:
    """Remove the schedule; the runs it started go on."""
    return Deleted(outcome=await call.runs.schedules.delete(call.path("name")))


async def list_hooks(call: Call[None]) -> list[HookRow]:
    """Your tenant's webhook triggers (never their secrets)."""
    return await call.runs.hooks.listed()


async def make_hook(call: Call[MakeHook]) -> NewHook:
    """Make a webhook trigger: where to send deliveries, and its secret (this once)."""
    body = call.input
    return await call.runs.hooks.create(
        body.name, task=body.task, agent=body.agent, secret=body.secret
    )


async def delete_hook(call: Call[NoFields]) -> Deleted:
    """Remove the hook: its deliveries are refused from then on."""
    return Deleted(outcome=await call.runs.hooks.delete(call.path("name")))


async def budgets(call: Call[None]) -> list[BudgetStatus]:
    """Your tenant's budgets, with what each has spent this period."""
    return await call.runs.tenants.budgets()


async def set_budget(call: Call[SetBudget]) -> BudgetStatus | None:
    """Set one of your tenant's budgets; null when both its limits are removed."""
    body = call.input
    changes = body.model_dump(include={"usd", "tokens", "mode"}, exclude_unset=True)
    return await call.runs.tenants.set_budget(None, body.period, changes, subject=body.subject)


async def costs(call: Call[CostsQuery]) -> list[CostRow]:
    """What your tenant's model calls cost, summed as asked."""
    by = [part.strip() for part in call.input.by.split(",") if part.strip()]
    since = datetime.now(UTC) - timedelta(hours=call.input.since_hours)
    return await call.runs.costs.summary(by, since=since)


async def delivery(call: Call[None]) -> Response:
    """A signed delivery to a hook: the run it starts (201; 200 for a delivery taken before).

    No credential: `X-Hub-Signature-256` (GitHub's) or `AgentLedger-Signature` proves it; a
    bad one, a stale one or an unknown hook is 401 and starts nothing, and counts against
    the sender's address as a failed credential does. The delivery's JSON body fills in the
    hook's task; its id (`X-GitHub-Delivery`, `AgentLedger-Delivery`) names its run."""
    request = call.request
    door = door_of(request)
    address = client_address(request)
    door.failures.check(address)
    body = await raw_body(request, door.config)
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        started: HookStarted = await door.runs.hooks.deliver(
            str(request.path_params["address"]), body, headers
        )
    except UnverifiedDelivery as err:
        door.failures.failed(address)
        raise unauthenticated(str(err)) from err
    return answer(started, 200 if started.existing else 201)


ENDPOINTS = [
    Endpoint("GET", "/v1/schedules", list_schedules, "viewer", answer=list[ScheduleRow]),
    Endpoint(
        "POST",
        "/v1/schedules",
        make_schedule,
        "runner",
        MakeSchedule,
        answer=ScheduleView,
        status=201,
    ),
    Endpoint("GET", SCHEDULE, show_schedule, "viewer", answer=ScheduleView),
    Endpoint("POST", SCHEDULE + "/pause", pause_schedule, "runner", NoFields, answer=ScheduleView),
    Endpoint(
        "POST", SCHEDULE + "/resume", resume_schedule, "runner", NoFields, answer=ScheduleView
    ),
    Endpoint(
        "POST", SCHEDULE + "/trigger", trigger_schedule, "runner", NoFields, answer=ScheduleView
    ),
    Endpoint("POST", SCHEDULE + "/delete", delete_schedule, "runner", NoFields, answer=Deleted),
    Endpoint("GET", "/v1/hooks", list_hooks, "admin", answer=list[HookRow]),
    Endpoint("POST", "/v1/hooks", make_hook, "admin", MakeHook, answer=NewHook, status=201),
    Endpoint("POST", "/v1/hooks/{name}/delete", delete_hook, "admin", NoFields, answer=Deleted),
    Endpoint("GET", "/v1/tenant/budgets", budgets, "admin", answer=list[BudgetStatus]),
    Endpoint(
        "POST", "/v1/tenant/budgets", set_budget, "admin", SetBudget, answer=BudgetStatus | None
    ),
    Endpoint("GET", "/v1/costs", costs, "admin", query=CostsQuery, answer=list[CostRow]),
    Endpoint(
        "POST",
        "/v1/hooks/{address}",
        delivery,
        SIGNED,
        answer=HookStarted,
        status=201,
        statuses={201: "the delivery started its run", 200: "the delivery was taken before"},
        headers={
            "X-Hub-Signature-256": "sha256=HMAC-SHA256(secret, body), as GitHub signs",
            "AgentLedger-Signature": "t=SECONDS,v1=HMAC-SHA256(secret, t.body), within 300 s",
            "X-GitHub-Delivery": "the delivery's id (or AgentLedger-Delivery)",
        },
    ),
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
