"""What a tenant's notification webhooks are told, and when: a run's events, as the mirror
holds them, turned into `approval.requested`, `approval.decided`, `run.finished` and
`run.failed` bodies (the run notifier, agentledger.workflows.run_notifier, delivers
each, signed, to every tenant-wide subscription)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentledger.core.events import EventType

# Named as the run events they tell of, where one does.
REQUESTED = EventType.APPROVAL_REQUESTED.value
FINISHED = EventType.RUN_FINISHED.value
NOTIFICATION_EVENTS = (REQUESTED, "approval.decided", FINISHED, "run.failed")
DECIDED = {EventType.APPROVAL_APPROVED, EventType.decided("rejected"), EventType.decided("expired")}


def notification(
    event_type: str, data: dict[str, Any], *, tenant: str, run_id: str, seq: int, at: datetime
) -> tuple[str, dict[str, Any]] | None:
    """The notification a run event makes (its name and body), or None for one that makes
    none."""
    if event_type == EventType.APPROVAL_REQUESTED:
        name = REQUESTED
        detail = {
            key: data.get(key)
            for key in ("approval_id", "kind", "tool", "summary", "arguments", "risk")
        }
        detail |= {"expires_at": data.get("expires_at"), "required_role": data.get("required_role")}
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
        "seq": seq,
        "at": at.isoformat(),
        "inbox": "/inbox",
        **detail,
    }
    return name, body
