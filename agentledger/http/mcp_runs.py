"""A run told in MCP's terms (the official `mcp` package's types): an agent as a tool, a run's
end as the tool's result, its events as progress, an approval as an elicitation form and
the form's answer as a decision, and a run as a task of the Tasks extension
(`io.modelcontextprotocol/tasks`, protocol 2026-07-28).

Nothing here reads or decides anything: agentledger.http.mcp_server asks the run, and
the caller's credential decides who may do what.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from agentledger.core.errors import InvalidRequest
from agentledger.core.events import EventType
from agentledger.core.results import PendingApproval, Receipt, RunState, WatchItem
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.states import TERMINAL
from agentledger.core.task_states import receipt_summary
from agentledger.http.agent_faces import OPTIONAL_FIELDS, approval_data
from agentledger.profiles import Agent

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# How often a client is asked to poll a task; a person decides in seconds, not less.
POLL_INTERVAL_MS = 2000
RESOURCE_SCHEME = "agentledger"
DECISIONS = ("approve", "reject")
# The approval form's own fields: a tool argument of the same name is shown, not editable.
FORM_FIELDS = ("decision", "reason")
ENDED = {status.value for status in TERMINAL}

OUTPUT_SCHEMA: JsonDict = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "description": "the durable run (agentledger status ID)"},
        "status": {
            "type": "string",
            "description": "completed, failed or cancelled; waiting_for_approval, with "
            "`approval` and `inbox` saying what waits and where a person decides it; "
            "waiting_for_message (a session answered); or queued (no worker serves it yet)",
        },
        "answer": {"type": ["string", "null"]},
        "summary": {"type": "string", "description": "the receipt in a few words"},
        "receipt": {"type": "string", "description": "the receipt's URL (REST, same key)"},
        "events": {"type": "string", "description": "the run's event stream (SSE, same key)"},
        "inbox": {"type": "string", "description": "where an approver decides what waits"},
        "approval": {"type": "object", "description": "the call that waits for a person"},
    },
    "required": ["run_id", "status"],
}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------- agents as tools


def input_schema() -> JsonDict:
    """A tool's input: the task, and the profile fields a caller may set (the run spec's own
    schema for each, so the two cannot drift)."""
    spec = RunSpec.model_json_schema()["properties"]
    properties: JsonDict = {
        "task": {"type": "string", "minLength": 1, "description": "what the agent should do"}
    }
    for name in OPTIONAL_FIELDS:
        field = {k: v for k, v in spec[name].items() if k != "title"}
        properties[name] = field
    return {
        "type": "object",
        "properties": properties,
        "required": ["task"],
        "additionalProperties": False,
    }


def tool_of(agent: Agent) -> types.Tool:
    tools = ", ".join(agent.tools) if agent.tools else "any tool its worker has"
    description = (
        f"{agent.instructions[:800]}\n\nRuns as a durable agentledger run (tools: {tools}); "
        "returns its answer and a link to its receipt. A step that needs a person's approval "
        "asks for it, or says where an approver decides it."
    )
    return types.Tool(
        name=agent.name,
        title=agent.name,
        description=description,
        input_schema=input_schema(),
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title=agent.name,
            read_only_hint=False,
            destructive_hint=True,  # its tools may act; the operator's approvals gate them
            idempotent_hint=False,
            open_world_hint=True,
        ),
    )


def task_argument(arguments: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The call's task and its other fields (left for the start to check)."""
    given = dict(arguments or {})
    task = given.pop("task", None)
    if not isinstance(task, str) or not task.strip():
        raise InvalidRequest("this tool takes `task`: what the agent should do, in words")
    return task, given


# ---------------------------------------------------------------- links and resources


def resource_uri(run_id: str, what: str) -> str:
    return f"{RESOURCE_SCHEME}://runs/{run_id}/{what}"


def run_of_uri(uri: str) -> tuple[str, str]:
    """The run id and what of it (`receipt` or `events`) a resource URI names."""
    prefix = f"{RESOURCE_SCHEME}://runs/"
    run_id, _, what = uri.removeprefix(prefix).rpartition("/")
    if not uri.startswith(prefix) or not run_id or what not in ("receipt", "events"):
        raise InvalidRequest(
            f"no such resource {uri[:200]!r}: read {prefix}RUN_ID/receipt or {prefix}RUN_ID/events"
        )
    return run_id, what


# What a run's resources are: the receipt (once it ended) and its events so far.
RESOURCES = {
    "receipt": "What the run did, cost and changed, and who approved what (once it ended)",
    "events": "The run's events so far, in order, as the mirror holds them",
}
RESOURCE_TEMPLATES = [
    types.ResourceTemplate(
        name=what,
        title=f"A run's {what}",
        uri_template=f"{RESOURCE_SCHEME}://runs/{{run_id}}/{what}",
        description=description,
        mime_type="application/json",
    )
    for what, description in RESOURCES.items()
]


def readable(status: str) -> list[str]:
    """What of a run in this status can be read: its events, and its receipt once ended."""
    return [what for what in RESOURCES if what == "events" or status in ENDED]


def run_resources(run_id: str, status: str, task: str) -> list[types.Resource]:
    return [
        types.Resource(
            name=f"{run_id} {what}",
            uri=resource_uri(run_id, what),
            description=f"{status}: {task[:200]}",
            mime_type="application/json",
        )
        for what in readable(status)
    ]


def json_contents(uri: str, value: Any) -> types.ReadResourceResult:
    text = json.dumps(value, default=str, indent=1)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
    )


def links(base: str, run_id: str) -> JsonDict:
    return {
        "receipt": f"{base}/v1/runs/{run_id}/receipt",
        "events": f"{base}/v1/runs/{run_id}/events",
    }


def resource_links(run_id: str, status: str) -> list[types.ResourceLink]:
    return [
        types.ResourceLink(name=what, uri=resource_uri(run_id, what), mime_type="application/json")
        for what in readable(status)
    ]


# ---------------------------------------------------------------- results


def ended_result(base: str, receipt: Receipt) -> types.CallToolResult:
    """The tool's result once the run ended: its answer and its receipt in a few words, with
    links to the receipt. A run that failed is a tool error (the call itself was served)."""
    run_id = receipt.run_id
    summary = receipt_summary(receipt.model_dump(mode="json"))
    data: JsonDict = {
        "run_id": run_id,
        "status": receipt.outcome.value,
        "answer": receipt.answer,
        "summary": summary,
        **links(base, run_id),
    }
    said = receipt.answer or receipt.error or f"the run {receipt.outcome.value}"
    text = f"{said}\n\n---\nrun {run_id}: {summary}\nreceipt: {data['receipt']}"
    return types.CallToolResult(
        content=[types.TextContent(text=text), *resource_links(run_id, receipt.outcome.value)],
        structured_content=data,
        is_error=receipt.outcome.value == "failed",
    )


def waiting_words(base: str, run_id: str, pending: PendingApproval) -> str:
    args = json.dumps(pending.arguments, sort_keys=True)
    return (
        f"The run {run_id} waits for approval of {pending.tool} {args} (the "
        f"{pending.required_role} role decides; until {pending.expires_at.isoformat()}). "
        f"It goes on by itself once decided: an approver decides in the inbox, {base}/inbox "
        f"(or POST {base}/v1/runs/{run_id}/approve)."
    )


def waiting_result(base: str, run_id: str, pending: PendingApproval) -> types.CallToolResult:
    """The tool's result while a person must decide and this caller cannot: what waits and
    where it is decided; the run keeps waiting, holding no worker."""
    data: JsonDict = {
        "run_id": run_id,
        "status": "waiting_for_approval",
        "approval": approval_data(pending),
        "inbox": f"{base}/inbox",
        **links(base, run_id),
    }
    return types.CallToolResult(
        content=[
            types.TextContent(text=waiting_words(base, run_id, pending)),
            *resource_links(run_id, "working"),
        ],
        structured_content=data,
    )


def queued_result(base: str, run_id: str, unserved: str) -> types.CallToolResult:
    """The run started, but no worker serves its queue: it waits, durable, until one
    does; the call says so at once instead of holding on."""
    data: JsonDict = {"run_id": run_id, "status": "queued", **links(base, run_id)}
    text = f"The run {run_id} is queued: {unserved}. Follow it: {data['events']}"
    return types.CallToolResult(
        content=[types.TextContent(text=text), *resource_links(run_id, "queued")],
        structured_content=data,
    )


def turn_result(base: str, run_id: str, turn: JsonDict) -> types.CallToolResult:
    """A session run answered a turn and waits for the next message (said over REST,
    `POST /v1/runs/{id}/turns`, or by any face that continues it)."""
    answer = str(turn.get("answer") or "")
    data: JsonDict = {
        "run_id": run_id,
        "status": "waiting_for_message",
        "answer": answer,
        **links(base, run_id),
    }
    text = (
        f"{answer}\n\n---\nrun {run_id} answered turn {turn.get('turn')} and stays open for "
        f"the next message: POST {base}/v1/runs/{run_id}/turns"
    )
    return types.CallToolResult(
        content=[types.TextContent(text=text), *resource_links(run_id, "working")],
        structured_content=data,
    )


# ---------------------------------------------------------------- an approval as a form


def _field(value: Any) -> JsonDict | None:
    """An editable form field for an argument's value; None for one a form cannot hold."""
    if isinstance(value, bool):
        return {"type": "boolean", "default": value}
    if isinstance(value, int):
        return {"type": "integer", "default": value}
    if isinstance(value, float):
        return {"type": "number", "default": value}
    if isinstance(value, str):
        return {"type": "string", "default": value}
    return None


def approval_key(approval_id: str) -> str:
    """The input request's key for an approval: unique over the run's life, as the spec
    asks."""
    return f"approval.{approval_id}"


def approval_form(pending: PendingApproval) -> types.ElicitRequest:
    """The approval as a form: approve or reject, a reason, and the proposed arguments
    (those a form can hold), each changeable: a changed one is approved as an edit."""
    properties: JsonDict = {
        "decision": {"type": "string", "title": "Decision", "enum": list(DECISIONS)},
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "why (a rejection's reason is kept in the receipt)",
        },
    }
    for name, value in pending.arguments.items():
        field = _field(value)
        if field is not None and name not in FORM_FIELDS:
            field["title"] = name
            field["description"] = f"proposed {name}: change it to approve with your edit"
            properties[name] = field
    args = json.dumps(pending.arguments, sort_keys=True)
    risk = f" (risk {pending.risk})" if pending.risk else ""
    message = (
        f"Approve {pending.tool} {args}{risk}? Your decision is recorded in the receipt under "
        "your credential."
    )
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=message,
            requested_schema={
                "type": "object",
                "properties": properties,
                "required": ["decision"],
            },
        )
    )


class Decision:
    """What a person answered to an approval form."""

    def __init__(self, approve: bool, *, edit: JsonDict | None = None, reason: str = "") -> None:
        self.approve = approve
        self.edit = edit
        self.reason = reason


def form_answer(raw: Any) -> types.ElicitResult | None:
    """An input response as the form's answer (None: none given), or InvalidRequest."""
    if raw is None or isinstance(raw, types.ElicitResult):
        return raw
    try:
        return types.ElicitResult.model_validate(raw)
    except ValidationError as err:
        raise InvalidRequest(
            f"the answer to an approval form is an elicitation result "
            f"({{'action': 'accept', 'content': {{'decision': ...}}}}): {err.errors()[0]['msg']}"
        ) from err


def decision_of(pending: PendingApproval, answer: Any) -> Decision | None:
    """The form's answer as a decision: accepted, the decision it names (with the arguments
    changed as its edit); declined, a rejection; dismissed (cancel) or absent, none."""
    if not isinstance(answer, types.ElicitResult) or answer.action == "cancel":
        return None
    if answer.action == "decline":
        return Decision(False, reason="declined when asked through MCP")
    content = answer.content or {}
    choice = content.get("decision")
    if choice not in DECISIONS:
        raise InvalidRequest(
            f"the form's decision is one of {', '.join(DECISIONS)}, not {choice!r}"
        )
    reason = str(content.get("reason") or "").strip()
    if choice == "reject":
        return Decision(False, reason=reason or "rejected when asked through MCP")
    edit = {
        name: content[name]
        for name, proposed in pending.arguments.items()
        if name in content and name not in FORM_FIELDS and content[name] != proposed
    }
    return Decision(True, edit=edit or None, reason=reason)


def request_state(run_id: str, pending: PendingApproval, seq: int) -> str:
    """What a client echoes back with its answer: the run, the approval it was shown, and
    the event it was told last. Never trusted: the run is read again through the caller's
    tenant, the decision bound to the action shown, and the caller's role checked."""
    return json.dumps(
        {
            "run": run_id,
            "approval": pending.approval_id,
            "action_hash": pending.action_hash,
            "seq": seq,
        }
    )


def asking(run_id: str, pending: PendingApproval, seq: int) -> types.InputRequiredResult:
    """The call's answer while its approval waits, on protocol 2026-07-28: the form, and
    what the client echoes with the person's answer when it calls again."""
    return types.InputRequiredResult(
        input_requests={approval_key(pending.approval_id): approval_form(pending)},
        request_state=request_state(run_id, pending, seq),
    )


def read_state(raw: str) -> JsonDict:
    try:
        state = json.loads(raw)
    except ValueError:
        state = None
    if (
        not isinstance(state, dict)
        or not all(isinstance(state.get(k), str) for k in ("run", "approval", "action_hash"))
        or not isinstance(state.get("seq"), int)
    ):
        raise InvalidRequest("requestState is not one this server gave")
    return state


# ---------------------------------------------------------------- progress


def progress_words(item: WatchItem) -> str | None:
    """An event in a few words, for a progress notification; None for what says nothing."""
    data = item.data
    if item.kind != "event":
        return None
    if item.type.startswith("step."):
        name = data.get("name") or data.get("tool") or data.get("type") or item.step_id
        return f"{name} step {item.type.split('.', 1)[1]}"
    if item.type == EventType.APPROVAL_REQUESTED:
        return f"waiting for approval of {data.get('tool')}"
    if item.type.startswith("approval."):
        by = f" by {data['by']}" if data.get("by") else ""
        return f"{data.get('tool') or 'approval'} {item.type.split('.')[1]}{by}"
    return item.type


# ---------------------------------------------------------------- a run as a task


def task_of(
    run: RunState,
    *,
    result: types.CallToolResult | None = None,
    asks: types.ElicitRequest | None = None,
    waiting: str | None = None,
) -> JsonDict:
    """The run as the Tasks extension's `DetailedTask`: working, input_required with the
    form a person fills (`asks`), completed with the tool's result (a run that failed is a
    tool error, not a failed task: the spec keeps `failed` for protocol errors), or
    cancelled."""
    status = run.status.value
    base: JsonDict = {
        "taskId": run.run_id,
        # The run's state does not carry its start: this is when the task was read.
        "createdAt": _now(),
        "lastUpdatedAt": _now(),
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if status == "cancelled":
        return {**base, "status": "cancelled", "statusMessage": "the run was cancelled"}
    if result is not None:
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        dumped.pop("resultType", None)
        return {**base, "status": "completed", "result": dumped}
    if asks is not None and run.pending_approval is not None:
        request = asks.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {
            **base,
            "status": "input_required",
            "statusMessage": asks.params.message,
            "inputRequests": {approval_key(run.pending_approval.approval_id): request},
        }
    return {**base, "status": "working", "statusMessage": waiting or status.replace("_", " ")}


def created_task(run_id: str) -> JsonDict:
    """The answer to a tool call made a task: the run started, to be polled."""
    now = _now()
    return {
        "resultType": "task",
        "taskId": run_id,
        "status": "working",
        "statusMessage": "the run started",
        "createdAt": now,
        "lastUpdatedAt": now,
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
