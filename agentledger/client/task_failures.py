"""Why a run stands still while a worker polls its queue: its workflow task fails, again and
again, and what to do about it.

Temporal retries a failed workflow task for ever and writes only the first failure into the
run's history, so neither the run nor its mirror row can say so; `status` reads it here.
The likeliest cause is a key mismatch: a client with AGENTLEDGER_ENCRYPTION_KEYS started the
run and a worker without them (or with other keys) cannot decode its payloads.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from agentledger.core.errors import UnknownEncryptionKey
from agentledger.temporal.encryption import ENCODING

KEYS_FIX = (
    "give every worker the same AGENTLEDGER_ENCRYPTION_KEYS as the clients that start runs, "
    "and restart it; the run then goes on from where it stopped"
)


async def failing_workflow_task(client: Client, newest_first: Sequence[HistoryEvent]) -> str | None:
    """What makes the run's workflow task fail, with the fix; None when the last workflow
    task that ended completed (`newest_first`: the run's latest history events)."""
    for event in newest_first:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return None
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return await _explained(client, event.workflow_task_failed_event_attributes.failure)
    return None


async def _explained(client: Client, recorded: Failure) -> str:
    failure = Failure()
    failure.CopyFrom(recorded)
    try:
        await client.data_converter.decode_failure(failure)
    except UnknownEncryptionKey as err:
        return (
            "a worker fails this run's workflow task (Temporal retries it, the run does not "
            f"move): its failure is encrypted with a key this client lacks ({err}), so the "
            f"worker holds other keys; {KEYS_FIX}"
        )
    said = ": ".join(_messages(failure))
    if ENCODING.decode() in said:
        return (
            "a worker fails this run's workflow task (Temporal retries it, the run does not "
            f"move): it cannot decrypt the run's payloads ({said}), so it runs without "
            f"AGENTLEDGER_ENCRYPTION_KEYS; {KEYS_FIX}"
        )
    return (
        "a worker fails this run's workflow task (Temporal retries it, the run does not "
        f"move): {said}; the worker's log has the trace"
    )


def _messages(failure: Failure) -> list[str]:
    found = [failure.message]
    while failure.HasField("cause"):
        failure = failure.cause
        found.append(failure.message)
    return [m for m in found if m]
