"""A run as an A2A task (pure): its state after each of its events, the receipt in a few
words, and a state change as the JSON an A2A push notification carries.

The A2A server (agentledger.http.a2a_tasks) and the task notifier on the worker
(agentledger.workflows.task_notifier) read a run the same way through these; the worker
needs no A2A package for it, so the JSON here is A2A 1.0's `StreamResponse` as its protobuf
JSON mapping writes it (camelCase fields, enum names).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentledger.core.events import EventType
from agentledger.core.spec import JsonDict
from agentledger.core.states import RunStatus

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
FINAL = frozenset({COMPLETED, FAILED, CANCELED})

# A run's status (agentledger.core.states) as a task's state.
OF_STATUS: dict[str, str] = {
    RunStatus.QUEUED: SUBMITTED,
    RunStatus.PLANNING: WORKING,
    RunStatus.WAITING_FOR_TOOL: WORKING,
    RunStatus.WAITING_FOR_APPROVAL: INPUT_REQUIRED,
    RunStatus.VERIFYING: WORKING,
    RunStatus.PAUSED: WORKING,
    RunStatus.WAITING_FOR_MESSAGE: INPUT_REQUIRED,
    RunStatus.COMPLETED: COMPLETED,
    RunStatus.FAILED: FAILED,
    RunStatus.CANCELLED: CANCELED,
    # A2A has no state for a spent budget: the task failed, its message says why.
    RunStatus.BUDGET_EXHAUSTED: FAILED,
}
# Events that move a task to a state; any other event leaves it where it is.
OF_EVENT: dict[str, str] = {
    EventType.RUN_QUEUED: SUBMITTED,
    EventType.RUN_STARTED: WORKING,
    EventType.RUN_ADMITTED: WORKING,
    EventType.APPROVAL_REQUESTED: INPUT_REQUIRED,
    EventType.APPROVAL_APPROVED: WORKING,
    EventType.APPROVAL_REJECTED: WORKING,
    EventType.APPROVAL_EXPIRED: WORKING,
    EventType.SESSION_TURN_STARTED: WORKING,
    EventType.SESSION_TURN_ANSWERED: INPUT_REQUIRED,
}


def state_of_status(status: str) -> str:
    return OF_STATUS.get(status, WORKING)


def state_after(event_type: str, data: JsonDict, before: str) -> str:
    """The task's state once an event of this type (with this data) happened."""
    if event_type == EventType.RUN_FINISHED:
        return state_of_status(str(data.get("status")))
    return OF_EVENT.get(event_type, before)


def receipt_summary(receipt: JsonDict) -> str:
    """The receipt in a few words: outcome, steps, tools, approvals, tokens and cost."""
    outcome = str(receipt.get("outcome", "ended"))
    steps = receipt.get("steps") or []
    tools = [s.get("name") for s in steps if isinstance(s, dict) and s.get("type") == "tool"]
    parts = [f"{outcome} in {len(steps)} steps"]
    if tools:
        parts.append(f"tools: {', '.join(str(t) for t in tools)}")
    for approval in receipt.get("approvals") or []:
        decided = f"{approval.get('tool')} {approval.get('decision')} by {approval.get('by')}"
        parts.append(decided + (" (edited)" if approval.get("edit") else ""))
    tokens = int(receipt.get("tokens_in") or 0) + int(receipt.get("tokens_out") or 0)
    parts.append(f"{tokens} tokens, ${float(receipt.get('cost_usd') or 0):.4f}")
    if receipt.get("error"):
        parts.append(f"error: {receipt['error']}")
    return "; ".join(parts)


def agent_message(message_id: str, task_id: str, context_id: str, text: str) -> JsonDict:
    return {
        "messageId": message_id,
        "taskId": task_id,
        "contextId": context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    }


def status_update(
    *,
    task_id: str,
    context_id: str,
    state: str,
    at: datetime,
    seq: int,
    event: str,
    text: str | None = None,
    extra: dict[str, Any] | None = None,
) -> JsonDict:
    """A state change as an A2A `StreamResponse` (its `statusUpdate`), in its JSON form; the
    run's event sequence number and type in `metadata.agentledger`."""
    status: JsonDict = {"state": state, "timestamp": at.isoformat().replace("+00:00", "Z")}
    if text is not None:
        status["message"] = agent_message(f"{task_id}.{seq}", task_id, context_id, text)
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": status,
            "metadata": {"agentledger": {"seq": seq, "event": event, **(extra or {})}},
        }
    }
