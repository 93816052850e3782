"""REST under /v1: a tenant's runs, each route one RunClient call on the view of the
caller's tenant. Bodies are the models of
agentledger.http.bodies; no field names a tenant: the credential does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from starlette.responses import Response
from starlette.routing import Route

from agentledger import profiles
from agentledger.core.backlog_models import EnqueueResult
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import InvalidRequest
from agentledger.core.listings import BacklogListing, RunRow, TimelineStep
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.results import ControlResult, DecisionResult, Receipt, SayResult
from agentledger.core.run_reports import Started
from agentledger.core.spec import RunSpec
from agentledger.http import bodies
from agentledger.http.endpoints import Call, Endpoint, routes_of
from agentledger.http.replies import answer

STARTED = {201: "the run started now", 200: "the same key named a run already: that run"}


def invalid(err: ValidationError, what: str) -> InvalidRequest:
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
    return InvalidRequest(f"invalid {what}: {problems}")


def started(run: Started) -> Response:
    body = bodies.RunStarted(run_id=run.run_id, existing=run.existing, said=run.said)
    return answer(body, 200 if run.existing else 201)


async def start(call: Call[bodies.StartRun]) -> Response:
    """Start a run of your tenant.

    `agent` names a profile (its model, instructions, tools and approvals); the
    `Idempotency-Key` header names the run, so a retried start answers the same run."""
    body = call.input
    client = call.runs
    raw: dict[str, Any] = {}
    if body.agent is not None:
        source = client.config.agents or DEMO_AGENTS
        agents = profiles.load_agents(source)
        raw = profiles.pick(agents, body.agent, source).spec_fields(agents)
    raw.update(body.model_dump(include={"user", "priority"}, exclude_none=True))
    raw.update(task=body.task)
    if key := call.request.headers.get("idempotency-key"):
        raw["idempotency_key"] = key
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as err:
        raise invalid(err, "run") from err
    return started(
        await client.runs.start(
            spec=spec, require_tools=body.agent is not None, double_texting=body.double_texting
        )
    )


async def list_runs(call: Call[bodies.RunsQuery]) -> list[RunRow]:
    """Your tenant's runs, newest first: those in a status, of an agent, started lately."""
    query = call.input
    since: datetime | None = None
    if query.since_hours is not None:
        since = datetime.now(UTC) - timedelta(hours=query.since_hours)
    return await call.runs.runs.recent(
        status=query.status, agent=query.agent, since=since, limit=query.limit
    )


async def get_run(call: Call[None]) -> Any:
    """The run's state, as `agentledger status --json` prints it."""
    return (await call.runs.runs.inspect(call.path("run_id"))).flat_json()


async def steps(call: Call[bodies.StepsQuery]) -> list[TimelineStep]:
    """The run's steps as its timeline shows them, in order, each with what it cost.

    Model turns (what the model said, the tools it called), tool calls (their arguments and
    results, or errors), approvals (their decision: who, what, why), each with its tokens,
    cost, attempt and times; a long input or output is cut short as JSON text."""
    return await call.runs.runs.timeline(call.path("run_id"), limit=call.input.limit)


async def receipt(call: Call[None]) -> Receipt:
    """The run's receipt: what it did, what it cost, who decided what (an ended run's)."""
    return await call.runs.runs.receipt(call.path("run_id"))


async def approve(call: Call[bodies.Approve]) -> DecisionResult:
    """Approve the action the run waits for, as your credential's identity, in the role the
    approval asks for (403 if your credential does not hold it).

    With `edit` (a JSON Merge Patch: null removes a field) or `arguments` (the whole
    arguments), the call changes first; with `action_hash`, only if the run still waits for
    that exact action. 409 if it waits for none."""
    body, client, run_id = call.input, call.runs, call.path("run_id")
    return await client.runs.approve(
        run_id,
        by=call.who.identity.name,
        role=body.role,
        edit=body.edit,
        replace=body.arguments,
        action_hash=body.action_hash,
    )


async def reject(call: Call[bodies.Reject]) -> DecisionResult:
    """Reject the action the run waits for, saying why, as your credential's identity, in
    the role the approval asks for (403 if your credential does not hold it).

    409 if it waits for none."""
    body, client, run_id = call.input, call.runs, call.path("run_id")
    return await client.runs.reject(
        run_id,
        by=call.who.identity.name,
        role=body.role,
        reason=body.reason,
        action_hash=body.action_hash,
    )


async def pause(call: Call[bodies.NoFields]) -> ControlResult:
    """Pause the run at its next step boundary (kept while no worker runs)."""
    return await call.runs.runs.pause(call.path("run_id"))


async def resume(call: Call[bodies.NoFields]) -> ControlResult:
    """Resume a paused run from where it paused."""
    return await call.runs.runs.resume(call.path("run_id"))


async def cancel(call: Call[bodies.NoFields]) -> bodies.Cancelled:
    """Cancel the run: it ends as cancelled and writes its receipt."""
    run_id = call.path("run_id")
    return bodies.Cancelled(run_id=run_id, outcome=await call.runs.runs.cancel(run_id))


async def say(call: Call[bodies.Say]) -> SayResult:
    """Tell the run something: a session takes it as its next turn; follow its answer on
    /events.

    While a session's turn is in flight, the message does what `double_texting` asks (409
    under reject)."""
    body = call.input
    return await call.runs.runs.say(
        call.path("run_id"),
        body.text,
        by=call.who.identity.name,
        message_id=body.message_id,
        double_texting=body.double_texting,
    )


async def end_session(call: Call[bodies.NoFields]) -> ControlResult:
    """End a session: it completes with its last answer and its receipt."""
    return await call.runs.sessions.end(call.path("run_id"), by=call.who.identity.name)


async def fork(call: Call[bodies.Fork]) -> Response:
    """A new run from a step of this one: the steps before it as recorded, a tool step's
    output edited if you like."""
    body = call.input
    forked = await call.runs.runs.fork(
        call.path("run_id"), from_step=body.from_step, edit_output=body.edit_output, key=body.key
    )
    return started(forked)


async def enqueue(call: Call[bodies.Enqueue]) -> EnqueueResult:
    """Add tasks to the agent's backlog, each run for your tenant."""
    return await call.runs.backlogs.enqueue(call.path("agent"), call.input.tasks)


async def backlog(call: Call[None]) -> BacklogListing:
    """The agent's backlog: your tenant's tasks alone."""
    return await call.runs.backlogs.tasks(call.path("agent"))


async def tenant(call: Call[None]) -> bodies.TenantView:
    """Your tenant: its settings and runs in flight, its approvers, and the policy its runs
    start under."""
    client = call.runs
    shown = await client.tenants.show()
    return bodies.TenantView(
        tenant=shown.tenant,
        settings=shown.settings,
        approvers=await client.approvers.listed(),
        policy=shown.policy,
    )


async def tenant_policy(call: Call[bodies.PolicyChange]) -> TenantPolicy:
    """Change the policy your tenant's runs start under: the fields you send, the others
    kept (agentledger.core.tenant_policy). New starts take it at once."""
    changes = call.input.model_dump(exclude_unset=True)
    return await call.runs.tenants.set_policy(None, changes)


RUN = "/v1/runs/{run_id}"
ENDPOINTS = [
    Endpoint(
        "POST",
        "/v1/runs",
        start,
        "runner",
        body=bodies.StartRun,
        answer=bodies.RunStarted,
        status=201,
        statuses=STARTED,
        headers={"Idempotency-Key": "names the run: a start sent again is the same run"},
    ),
    Endpoint("GET", "/v1/runs", list_runs, "viewer", query=bodies.RunsQuery, answer=list[RunRow]),
    Endpoint("GET", RUN, get_run, "viewer", answer=bodies.RunView),
    Endpoint(
        "GET", RUN + "/steps", steps, "viewer", query=bodies.StepsQuery, answer=list[TimelineStep]
    ),
    Endpoint("GET", RUN + "/receipt", receipt, "viewer", answer=Receipt),
    Endpoint("POST", RUN + "/approve", approve, "approver", bodies.Approve, answer=DecisionResult),
    Endpoint("POST", RUN + "/reject", reject, "approver", bodies.Reject, answer=DecisionResult),
    Endpoint("POST", RUN + "/pause", pause, "runner", bodies.NoFields, answer=ControlResult),
    Endpoint("POST", RUN + "/resume", resume, "runner", bodies.NoFields, answer=ControlResult),
    Endpoint("POST", RUN + "/cancel", cancel, "runner", bodies.NoFields, answer=bodies.Cancelled),
    Endpoint("POST", RUN + "/say", say, "runner", bodies.Say, answer=SayResult),
    Endpoint("POST", RUN + "/turns", say, "runner", bodies.Say, answer=SayResult),
    Endpoint("POST", RUN + "/end", end_session, "runner", bodies.NoFields, answer=ControlResult),
    Endpoint(
        "POST",
        RUN + "/fork",
        fork,
        "runner",
        bodies.Fork,
        answer=bodies.RunStarted,
        status=201,
        statuses=STARTED,
    ),
    Endpoint(
        "POST",
        "/v1/backlogs/{agent}/tasks",
        enqueue,
        "runner",
        bodies.Enqueue,
        answer=EnqueueResult,
    ),
    Endpoint("GET", "/v1/backlogs/{agent}/tasks", backlog, "viewer", answer=BacklogListing),
    Endpoint("GET", "/v1/tenant", tenant, "admin", answer=bodies.TenantView),
    Endpoint(
        "PUT", "/v1/tenant/policy", tenant_policy, "admin", bodies.PolicyChange, answer=TenantPolicy
    ),
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
