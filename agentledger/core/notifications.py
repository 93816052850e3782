"""What a tenant's notification webhooks are told, and when: a run's events, as the mirror
holds them, turned into `approval.requested`, `approval.decided`, `run.finished` and
`run.failed` bodies (the run notifier, agentledger.workflows.run_notifier, delivers
each, signed, to every tenant-wide subscription).

An approval's body names its item in the inbox (`inbox`: the inbox's path with the run and
the approval in its fragment, which the page opens at), so a receiver with the door's public
address links straight to it (agentledger.core.slack_messages)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from agentledger.core.events import EventType

# Named as the run events they tell of, where one does.
REQUESTED = EventType.APPROVAL_REQUESTED.value
FINISHED = EventType.RUN_FINISHED.value
NOTIFICATION_EVENTS = (REQUESTED, "approval.decided", FINISHED, "run.failed")
DECIDED = {EventType.APPROVAL_APPROVED, EventType.decided("rejected"), EventType.decided("expired")}
# The run events a notification tells of: a run's notifier starts at the first one written.
TOLD = frozenset({EventType.APPROVAL_REQUESTED, *DECIDED, EventType.RUN_FINISHED})
INBOX = "/inbox"


def inbox_item(run_id: str, approval_id: str) -> str:
    """The inbox's path, opened at this approval's card."""
    return f"{INBOX}#{urlencode({'run': run_id, 'approval': approval_id})}"


def notification(
    event_type: str,
    data: dict[str, Any],
    *,
    tenant: str,
    run_id: str,
    seq: int,
    at: datetime,
    agent: str | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """The notification a run event makes (its name and body), or None for one that makes
    none."""
    inbox = INBOX
    if event_type == EventType.APPROVAL_REQUESTED:
        name = REQUESTED
        detail = {
            key: data.get(key)
            for key in ("approval_id", "kind", "tool", "summary", "arguments", "risk")
        }
        detail |= {"expires_at": data.get("expires_at"), "required_role": data.get("required_role")}
        if data.get("approval_id"):
            inbox = inbox_item(run_id, str(data["approval_id"]))
    elif event_type in DECIDED:
        name = "approval.decided"
        detail = {
            "decision": str(event_type).rsplit(".", 1)[-1],
            "by": data.get("by"),
            "standing_rule": data.get("standing_rule"),
        }
    elif event_type == EventType.RUN_FINISHED:
        status = data.get("status")
        name = FINISHED if status == "completed" else "run.failed"
        detail = {"status": status, "error": data.get("error")}
    else:
        return None
    body = {
        "event": name,
        "tenant": tenant,
        "run_id": run_id,
        "agent": agent,
        "seq": seq,
        "at": at.isoformat(),
        "inbox": inbox,
        **detail,
    }
    return name, body
