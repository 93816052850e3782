"""REST under /v1: a tenant's runs, each route one RunClient call on the view of the
caller's tenant (docs/http.md lists them). Bodies are JSON objects; a field a route does
not take is refused by name, and no field names a tenant: the credential does."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentledger import profiles
from agentledger.core.backlog_models import TaskItem
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import InvalidRequest
from agentledger.core.spec import RunSpec
from agentledger.http.auth import caller, json_body, runs_for
from agentledger.http.replies import answer

MAX_LIST = 500
NOTHING: frozenset[str] = frozenset()


def fields(body: dict[str, Any], allowed: set[str], required: frozenset[str] = NOTHING) -> None:
    """Refuse a field the route does not take, or a missing one, naming them."""
    extra = sorted(set(body) - allowed)
    if extra:
        takes = ", ".join(sorted(allowed)) or "no field"
        why = " (the tenant is your credential's)" if "tenant" in extra else ""
        raise InvalidRequest(f"unknown field(s) {', '.join(extra)}{why}; this takes {takes}")
    missing = sorted(required - set(body))
    if missing:
        raise InvalidRequest(f"missing field(s): {', '.join(missing)}")


def text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{name!r} must be non-empty text")
    return value


def optional_text(body: dict[str, Any], name: str) -> str | None:
    return text(body, name) if body.get(name) is not None else None


def run_id(request: Request) -> str:
    return str(request.path_params["run_id"])


def invalid(err: ValidationError, what: str) -> InvalidRequest:
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
    return InvalidRequest(f"invalid {what}: {problems}")


async def start(request: Request) -> Response:
    """A run of the caller's tenant: `task`, optionally `agent` (a profile's name), `user`,
    `priority`; the `Idempotency-Key` header names it, so a retried start is the same run."""
    who = await caller(request, need="runner")
    body = await json_body(request)
    fields(body, {"task", "agent", "user", "priority"}, frozenset({"task"}))
    client = runs_for(request, who)
    raw: dict[str, Any] = {}
    if "agent" in body:
        source = client.settings.agents or DEMO_AGENTS
        agents = profiles.load_agents(source)
        raw = profiles.pick(agents, text(body, "agent"), source).spec_fields(agents)
    raw.update({k: body[k] for k in ("user", "priority") if k in body})
    raw.update(task=text(body, "task"))
    if key := request.headers.get("idempotency-key"):
        raw["idempotency_key"] = key
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as err:
        raise invalid(err, "run") from err
    started = await client.runs.start(spec=spec, require_tools="agent" in body)
    return answer(
        {"run_id": started.run_id, "existing": started.existing},
        200 if started.existing else 201,
    )


async def list_runs(request: Request) -> Response:
    """The tenant's runs, newest first: `?status=` and `?limit=` (at most 500)."""
    who = await caller(request, need="viewer")
    try:
        limit = int(request.query_params.get("limit", "50"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIST:
        raise InvalidRequest(f"limit takes a whole number from 1 to {MAX_LIST}")
    status = request.query_params.get("status") or None
    return answer(await runs_for(request, who).runs.recent(status=status, limit=limit))


async def get_run(request: Request) -> Response:
    who = await caller(request, need="viewer")
    return answer((await runs_for(request, who).runs.inspect(run_id(request))).flat_json())


async def receipt(request: Request) -> Response:
    who = await caller(request, need="viewer")
    return answer(await runs_for(request, who).runs.receipt(run_id(request)))


async def decide(request: Request) -> Response:
    """Approve (`edit` optional) or reject (`reason`) the pending action, as the caller's
    identity. `role` defaults to the role the approval asks for; `action_hash` binds the
    decision to the action the approver saw."""
    who = await caller(request, need="approver")
    body = await json_body(request)
    client = runs_for(request, who)
    approving = request.url.path.endswith("/approve")
    allowed = {"role", "action_hash", "edit" if approving else "reason"}
    fields(body, allowed, NOTHING if approving else frozenset({"reason"}))
    role = optional_text(body, "role")
    if role is None:
        pending = (await client.runs.status(run_id(request))).pending_approval
        if pending is None:
            raise InvalidRequest(f"run {run_id(request)} waits for no approval")
        role = pending.required_role
    common: dict[str, Any] = {
        "by": who.identity,
        "role": role,
        "action_hash": optional_text(body, "action_hash"),
    }
    if approving:
        edit = body.get("edit")
        if edit is not None and not isinstance(edit, dict):
            raise InvalidRequest("'edit' must be a JSON object of the arguments to change")
        return answer(await client.runs.approve(run_id(request), edit=edit, **common))
    return answer(await client.runs.reject(run_id(request), reason=text(body, "reason"), **common))


async def control(request: Request) -> Response:
    """Pause, resume or cancel the run."""
    who = await caller(request, need="runner")
    fields(await json_body(request), set())
    client = runs_for(request, who)
    act = request.url.path.rsplit("/", 1)[1]
    if act == "cancel":
        return answer(
            {"run_id": run_id(request), "outcome": await client.runs.cancel(run_id(request))}
        )
    done = await (client.runs.pause if act == "pause" else client.runs.resume)(run_id(request))
    return answer(done)


async def say(request: Request) -> Response:
    """Tell the run something (a session takes it as its next turn); follow its answer on
    /events."""
    who = await caller(request, need="runner")
    body = await json_body(request)
    fields(body, {"text", "message_id"}, frozenset({"text"}))
    done = await runs_for(request, who).runs.say(
        run_id(request),
        text(body, "text"),
        by=who.identity,
        message_id=optional_text(body, "message_id"),
    )
    return answer(done)


async def end_session(request: Request) -> Response:
    who = await caller(request, need="runner")
    fields(await json_body(request), set())
    return answer(await runs_for(request, who).sessions.end(run_id(request), by=who.identity))


async def fork(request: Request) -> Response:
    """A new run from `from_step` of this one (`edit_output` for a tool step; `key`)."""
    who = await caller(request, need="runner")
    body = await json_body(request)
    fields(body, {"from_step", "edit_output", "key"}, frozenset({"from_step"}))
    step = body["from_step"]
    if not isinstance(step, int) or isinstance(step, bool):
        raise InvalidRequest("'from_step' must be a step number")
    started = await runs_for(request, who).runs.fork(
        run_id(request),
        from_step=step,
        edit_output=body.get("edit_output"),
        key=optional_text(body, "key"),
    )
    return answer(
        {"run_id": started.run_id, "existing": started.existing},
        200 if started.existing else 201,
    )


async def enqueue(request: Request) -> Response:
    """Add `tasks` (each `{"idempotency_key", "spec": {...}}`) to the agent's backlog."""
    who = await caller(request, need="runner")
    body = await json_body(request)
    fields(body, {"tasks"}, frozenset({"tasks"}))
    if not isinstance(body["tasks"], list) or not body["tasks"]:
        raise InvalidRequest("'tasks' must be a non-empty list")
    try:
        tasks = [TaskItem.model_validate(each) for each in body["tasks"]]
    except ValidationError as err:
        raise invalid(err, "task") from err
    agent = str(request.path_params["agent"])
    return answer(await runs_for(request, who).backlogs.enqueue(agent, tasks))


async def backlog(request: Request) -> Response:
    who = await caller(request, need="viewer")
    agent = str(request.path_params["agent"])
    return answer(await runs_for(request, who).backlogs.tasks(agent))


async def tenant(request: Request) -> Response:
    """The caller's tenant: its settings and runs in flight, and its approvers (admin)."""
    who = await caller(request, need="admin")
    client = runs_for(request, who)
    rows = await client.tenants.listed()
    return answer(
        {
            "tenant": who.tenant,
            "settings": rows[0] if rows else None,
            "approvers": [s.model_dump(mode="json") for s in await client.approvers.listed()],
        }
    )


RUN = "/v1/runs/{run_id}"


def routes() -> list[Route]:
    return [
        Route("/v1/runs", start, methods=["POST"]),
        Route("/v1/runs", list_runs, methods=["GET"]),
        Route(RUN, get_run, methods=["GET"]),
        Route(RUN + "/receipt", receipt, methods=["GET"]),
        Route(RUN + "/approve", decide, methods=["POST"]),
        Route(RUN + "/reject", decide, methods=["POST"]),
        *(
            Route(f"{RUN}/{act}", control, methods=["POST"])
            for act in ("pause", "resume", "cancel")
        ),
        Route(RUN + "/say", say, methods=["POST"]),
        Route(RUN + "/turns", say, methods=["POST"]),
        Route(RUN + "/end", end_session, methods=["POST"]),
        Route(RUN + "/fork", fork, methods=["POST"]),
        Route("/v1/backlogs/{agent}/tasks", enqueue, methods=["POST"]),
        Route("/v1/backlogs/{agent}/tasks", backlog, methods=["GET"]),
        Route("/v1/tenant", tenant, methods=["GET"]),
    ]
