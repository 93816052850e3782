"""A run told as an A2A task, with the `a2a-sdk`'s own types: its events as status updates,
its answer and stored artifacts as artifacts, an approval as `input-required`, and a
reply that decides it; a session's answered turn as `input-required` with the answer.

Each status update carries the run's event in `metadata.agentledger` (`seq`, `event`,
`step_id`, `data`), so a client knows the last event it saw and resumes after it
(`Last-Event-ID`), as the run's SSE stream resumes. The state after each event is
agentledger.core.task_states's, the same the push notifications tell.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format, struct_pb2

from agentledger.core import task_states
from agentledger.core.errors import InvalidRequest
from agentledger.core.events import EventType
from agentledger.core.results import PendingApproval, RunState, WatchItem
from agentledger.core.spec import JsonDict
from agentledger.core.webhook_models import StoredArtifact
from agentledger.http.agent_faces import approval_data

Event = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
DECISIONS = ("approve", "edit", "reject")
REPLY_HELP = (
    'reply on this task with a data part {"decision": "approve"}, {"decision": "edit", '
    '"edit": {ARGUMENT: VALUE}} (approve with those arguments changed) or {"decision": '
    '"reject", "reason": "..."}'
)
# A stored artifact larger than this is named with its size, its content left out.
INLINE_ARTIFACT_BYTES = 1_000_000
TEXTUAL = ("text/", "application/json")


def state(name: str) -> Any:
    """The SDK's enum value of a task state's name."""
    return TaskState.Value(name)


def value(data: Any) -> struct_pb2.Value:
    return json_format.ParseDict(json.loads(json.dumps(data, default=str)), struct_pb2.Value())


def struct(data: JsonDict) -> struct_pb2.Struct:
    return json_format.ParseDict(json.loads(json.dumps(data, default=str)), struct_pb2.Struct())


def stamped(status: TaskStatus, at: datetime | None) -> TaskStatus:
    status.timestamp.FromDatetime(at or datetime.now(UTC))
    return status


def agent_message(task_id: str, context_id: str, message_id: str, parts: list[Part]) -> Message:
    return Message(
        message_id=message_id,
        task_id=task_id,
        context_id=context_id,
        role=Role.ROLE_AGENT,
        parts=parts,
    )


def approval_parts(pending: PendingApproval) -> list[Part]:
    """What the approval asks, in words and as data (what a reply binds to)."""
    args = json.dumps(pending.arguments, sort_keys=True)
    risk = f" (risk {pending.risk})" if pending.risk else ""
    text = (
        f"Approve {pending.tool} {args}{risk}? It needs the {pending.required_role} role; "
        f"{REPLY_HELP}."
    )
    data = {**approval_data(pending), "decisions": list(DECISIONS)}
    return [Part(text=text), Part(data=value(data), media_type="application/json")]


def summary_parts(run_id: str, receipt: JsonDict) -> list[Part]:
    data = {
        "run_id": run_id,
        "outcome": receipt.get("outcome"),
        "receipt": f"/v1/runs/{run_id}/receipt",
        "tokens_in": receipt.get("tokens_in"),
        "tokens_out": receipt.get("tokens_out"),
        "cost_usd": receipt.get("cost_usd"),
    }
    return [
        Part(text=task_states.receipt_summary(receipt)),
        Part(data=value(data), media_type="application/json"),
    ]


def stored_artifact(row: StoredArtifact) -> Artifact:
    """One of the run's stored artifacts: its content, as text where it is text."""
    content, media = row.content, row.media_type
    if len(content) > INLINE_ARTIFACT_BYTES:
        meta = {"artifact_id": row.artifact_id, "step_id": row.step_id}
        too_large = f"{row.size_bytes} bytes, too large to carry here"
        part = Part(text=too_large, metadata=struct(meta))
    elif media.startswith(TEXTUAL):
        part = Part(text=content.decode("utf-8", errors="replace"), media_type=media)
    else:
        part = Part(raw=content, media_type=media, filename=row.name)
    return Artifact(artifact_id=row.artifact_id, name=row.name, parts=[part])


def artifacts_of(receipt: JsonDict, stored: list[StoredArtifact]) -> list[Artifact]:
    """The run's artifacts: those it stored, its answer among them (`answer.md`; stored
    once by content, so a run whose answer another run gave first has it added here)."""
    found = [stored_artifact(row) for row in stored]
    answer = receipt.get("answer")
    if answer:
        answer_id = "sha256:" + hashlib.sha256(str(answer).encode()).hexdigest()
        if all(a.artifact_id != answer_id for a in found):
            part = Part(text=str(answer), media_type="text/markdown")
            found.insert(0, Artifact(artifact_id=answer_id, name="answer.md", parts=[part]))
    return found


class TaskStory:
    """The run's items, folded into the task's state and told as A2A events."""

    def __init__(self, task_id: str, context_id: str, current: str | None = None) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.state = current or task_states.SUBMITTED
        self.finished_seq = 0
        self.ended = False

    def update(
        self, name: str, at: datetime | None, meta: JsonDict, parts: list[Part] | None = None
    ) -> TaskStatusUpdateEvent:
        status = stamped(TaskStatus(state=state(name)), at)
        if parts:
            seq = meta.get("seq", "end")
            status.message.CopyFrom(
                agent_message(self.task_id, self.context_id, f"{self.task_id}.{seq}", parts)
            )
        return TaskStatusUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            status=status,
            metadata=struct({"agentledger": meta}),
        )

    def tell(self, item: WatchItem, stored: list[StoredArtifact]) -> Iterator[Event]:
        """The A2A events of one item: a status update per event (the run's end waits for
        its receipt), then at the receipt its artifacts and the final state with the
        receipt's summary. Model text is not told: the answer comes whole, as an artifact."""
        if item.kind == "event" and item.seq is not None:
            after = task_states.state_after(item.type, item.data, self.state)
            if after in task_states.FINAL:
                self.finished_seq = item.seq
                return
            self.state = after
            meta = {"seq": item.seq, "event": item.type, "step_id": item.step_id, "data": item.data}
            parts = None
            if item.type == EventType.APPROVAL_REQUESTED:
                parts = approval_parts(PendingApproval.model_validate(item.data))
            elif item.type == EventType.SESSION_TURN_ANSWERED:
                parts = [Part(text=str(item.data.get("answer") or ""))]
            yield self.update(after, item.at, meta, parts)
        elif item.kind == "receipt":
            receipt = item.data
            for artifact in artifacts_of(receipt, stored):
                yield TaskArtifactUpdateEvent(
                    task_id=self.task_id,
                    context_id=self.context_id,
                    artifact=artifact,
                    last_chunk=True,
                )
            self.state = task_states.state_of_status(str(receipt.get("outcome")))
            self.ended = True
            meta = {"seq": self.finished_seq, "event": EventType.RUN_FINISHED}
            yield self.update(self.state, None, meta, summary_parts(self.task_id, receipt))


def task_of(
    run: RunState,
    context_id: str,
    *,
    receipt: JsonDict | None = None,
    stored: list[StoredArtifact] | None = None,
) -> Task:
    """The task as the run stands now: its state, what it asks or how it ended, its task as
    the first message of its history, and (ended) its artifacts."""
    name = task_states.state_of_status(run.status.value)
    status = stamped(TaskStatus(state=state(name)), None)
    parts: list[Part] = []
    if run.pending_approval is not None:
        parts = approval_parts(run.pending_approval)
    elif run.status.value == "waiting_for_message" and run.result:
        parts = [Part(text=run.result)]  # a session's last answer, waiting for the next turn
    elif receipt is not None:
        parts = summary_parts(run.run_id, receipt)
    if parts:
        status.message.CopyFrom(agent_message(run.run_id, context_id, f"{run.run_id}.now", parts))
    task = Task(id=run.run_id, context_id=context_id, status=status)
    task.history.append(
        Message(
            message_id=f"{run.run_id}.task",
            task_id=run.run_id,
            context_id=context_id,
            role=Role.ROLE_USER,
            parts=[Part(text=run.task)],
        )
    )
    if receipt is not None:
        task.artifacts.extend(artifacts_of(receipt, stored or []))
    task.metadata.CopyFrom(struct({"agentledger": {"status": run.status.value}}))
    return task


def text_of(message: Message) -> str:
    """The message's text parts, joined: a new task's task, or a message to a run."""
    return "\n".join(part.text for part in message.parts if part.HasField("text")).strip()


def decision_of(message: Message) -> JsonDict | None:
    """The decision a reply carries (its data part with `decision`), checked; None for a
    message that decides nothing."""
    for part in message.parts:
        if not part.HasField("data"):
            continue
        data = json_format.MessageToDict(part.data)
        if not isinstance(data, dict) or "decision" not in data:
            continue
        if data["decision"] not in DECISIONS:
            raise InvalidRequest(f"'decision' takes one of {', '.join(DECISIONS)}; {REPLY_HELP}")
        edit = data.get("edit")
        if data["decision"] == "edit" and not isinstance(edit, dict):
            raise InvalidRequest("an edit's 'edit' must be an object of the arguments to change")
        if data["decision"] == "reject" and not str(data.get("reason") or "").strip():
            raise InvalidRequest("a rejection takes a 'reason'")
        return data
    return None
