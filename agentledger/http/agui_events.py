"""A run's story in AG-UI's terms: the pure mapping from agentledger's watch items to AG-UI events.

An AG-UI thread is one durable agentledger run; each AG-UI run (one request) is a stretch of
that run's events, and ends where the run ends or waits for a person. A model call's
streamed text is a text message; a tool call step is a tool call with its arguments and
result (read from the step's mirror row, which the caller passes in). A pending approval
announces the proposed call (with no result: the call that runs after the decision, edited
or not, is a call of its own) and finishes the AG-UI run with an *interrupt* outcome
(`RunFinishedInterruptOutcome`, the protocol's own since ag-ui-protocol 1.0), which a later
request's `resume` entry answers; the decision comes back as `agentledger.approval.<decision>`.
Status changes are state snapshots; agentledger's other events travel as CUSTOM events named
`agentledger.<type>`. Every id is derived from the run's step ids, so a client that comes back
to a thread is told the same story with the same ids.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from agentledger.core.events import EventType
from agentledger.core.results import WatchItem
from agentledger.core.spec import JsonDict

PROTOCOL_VERSION = "1.0"
# What a resume entry's payload says about a tool approval: approve (with `editedArgs`, the
# arguments to run instead) or reject (with a reason).
DECISION_SCHEMA: JsonDict = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "editedArgs": {"type": "object", "description": "arguments to run instead"},
        "reason": {"type": "string", "description": "why, when rejecting"},
    },
    "required": ["approved"],
}


def step_type(item: WatchItem) -> str | None:
    """The kind of step a `step.*` event closes (model_call, tool_call, ...)."""
    if item.kind == "event" and item.type.startswith("step."):
        kind = item.data.get("type")
        return kind if isinstance(kind, str) else None
    return None


def interrupt_of(pending: JsonDict) -> Interrupt:
    """The AG-UI interrupt for a pending approval (`approval.requested`'s data)."""
    kind = str(pending.get("kind", "action"))
    tool = str(pending.get("tool", ""))
    schema = dict(DECISION_SCHEMA)
    if pending.get("parameters"):
        properties = {**schema["properties"], "editedArgs": pending["parameters"]}
        schema = {**schema, "properties": properties}
    what = f"run {tool}" if kind == "action" else f"{kind} ({tool})"
    return Interrupt(
        id=str(pending["approval_id"]),
        reason="tool_approval" if kind == "action" else f"agentledger.{kind}",
        message=f"Approve to {what}?" + (f" {pending['reason']}" if pending.get("reason") else ""),
        tool_call_id=str(pending["step_id"]) if kind == "action" else None,
        response_schema=schema,
        expires_at=str(pending.get("expires_at")) if pending.get("expires_at") else None,
        metadata={
            "agentledger": {
                key: pending.get(key)
                for key in ("kind", "tool", "arguments", "action_hash", "required_role", "risk")
                if key in pending
            }
        },
    )


def _millis(at: datetime | None) -> int | None:
    return int(at.timestamp() * 1000) if at is not None else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class AguiStory:
    """Turns one AG-UI run's stretch of an agentledger run into AG-UI events. Feed it the
    watch items in order (`translate`); it says when the AG-UI run has ended (`ended`)."""

    def __init__(self, request: RunAgentInput, run_id: str) -> None:
        self.thread_id = request.thread_id
        self.agui_run_id = request.run_id
        self.run_id = run_id
        self.status: str | None = None
        self.pending: str | None = None
        self.ended = False
        self._open_text: str | None = None  # the text message open now
        self._texted: set[str] = set()  # model calls whose text was streamed
        self._finished: JsonDict = {}

    def started(self, request: RunAgentInput) -> RunStartedEvent:
        return RunStartedEvent(
            thread_id=self.thread_id,
            run_id=self.agui_run_id,
            protocol_version=PROTOCOL_VERSION,
            input=request,
        )

    def needs_row(self, item: WatchItem) -> bool:
        """Whether `translate` needs the step's mirror row for this item: a tool call's
        arguments and output, and a model call's text when none was streamed."""
        kind = step_type(item)
        return kind == "tool_call" or (kind == "model_call" and item.step_id not in self._texted)

    def follow(self, item: WatchItem) -> None:
        """Take in an item the client has seen already (a resumed run's past): its state
        changes, without events."""
        if item.kind == "event" and item.type == EventType.STATUS_CHANGED:
            self.status = str(item.data.get("to"))
        if item.kind == "event" and item.type.startswith("approval."):
            self.pending = item.step_id if item.type == EventType.APPROVAL_REQUESTED else None

    def translate(
        self, item: WatchItem, row: JsonDict | None = None, *, decided: bool = False
    ) -> list[BaseEvent]:
        """The AG-UI events for `item`; `row` is its step's mirror row when
        `needs_row(item)` (name, input, output, error). An approval already `decided` (a
        story told again) is told without interrupting: its decision follows."""
        if self.ended:
            return []
        at = _millis(item.at)
        if item.kind == "text":
            return self._text_piece(item)
        if item.kind == "text_reset":  # a retry's text replaces the message told so far
            return [*self._close_text(), self._custom(item, at)]
        if item.kind == "receipt":
            return self._finish(item.data)
        self.follow(item)
        kind = step_type(item)
        if kind == "model_call" and item.step_id is not None:
            return self._model_text(item.step_id, row)
        if kind == "tool_call" and item.step_id is not None and row is not None:
            return self._tool_call(item.step_id, row, at)
        if item.type == EventType.STATUS_CHANGED:
            return [self.snapshot(at)]
        if item.type == EventType.APPROVAL_REQUESTED and not decided:
            return self._interrupt(item.data, at)
        if item.type == EventType.APPROVAL_REQUESTED:
            return [*self._proposed(item.data, at), self._custom(item, at)]
        if item.type == EventType.RUN_FINISHED:
            self._finished = item.data
        return [self._custom(item, at)]

    def _custom(self, item: WatchItem, at: int | None) -> CustomEvent:
        return CustomEvent(
            name=f"agentledger.{item.type}",
            value={"seq": item.seq, "step_id": item.step_id, "data": item.data},
            timestamp=at,
        )

    def snapshot(self, at: int | None = None) -> StateSnapshotEvent:
        state = {"run_id": self.run_id, "status": self.status, "pending_approval": self.pending}
        return StateSnapshotEvent(snapshot={"agentledger": state}, timestamp=at)

    def _text_piece(self, item: WatchItem) -> list[BaseEvent]:
        """A piece of a model call's streamed text. A retried call streams again from its
        start: the new attempt's text is a message of its own, the earlier one left as
        it was cut off (the protocol has no retraction)."""
        step = item.step_id or "text"
        attempt = int(item.data.get("attempt") or 1)
        message = f"{step}.text" if attempt == 1 else f"{step}.text.{attempt}"
        events: list[BaseEvent] = []
        if self._open_text != message:
            events += self._close_text()
            events.append(TextMessageStartEvent(message_id=message, role="assistant"))
            self._open_text = message
            self._texted.add(step)
        if item.text:
            events.append(TextMessageContentEvent(message_id=message, delta=item.text))
        return events

    def _close_text(self) -> list[BaseEvent]:
        if self._open_text is None:
            return []
        message, self._open_text = self._open_text, None
        return [TextMessageEndEvent(message_id=message)]

    def _model_text(self, step_id: str, row: JsonDict | None) -> list[BaseEvent]:
        """A model call's text message ends with its step; one whose text was not streamed
        (an ended run's story, read from the mirror) is told whole from its row."""
        if step_id in self._texted:
            return self._close_text()
        output = (row or {}).get("output") or {}
        content = output.get("content") if isinstance(output, dict) else None
        if not content:
            return []
        message = f"{step_id}.text"
        return [
            *self._close_text(),
            TextMessageStartEvent(message_id=message, role="assistant"),
            TextMessageContentEvent(message_id=message, delta=str(content)),
            TextMessageEndEvent(message_id=message),
        ]

    def _call(self, call_id: str, tool: str, arguments: Any, at: int | None) -> list[BaseEvent]:
        return [
            *self._close_text(),
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=tool, timestamp=at),
            ToolCallArgsEvent(tool_call_id=call_id, delta=_text(arguments), timestamp=at),
            ToolCallEndEvent(tool_call_id=call_id, timestamp=at),
        ]

    def _result(self, call_id: str, content: Any, at: int | None) -> ToolCallResultEvent:
        return ToolCallResultEvent(
            message_id=f"{call_id}.result",
            tool_call_id=call_id,
            content=_text(content),
            role="tool",
            timestamp=at,
        )

    def _tool_call(self, step_id: str, row: JsonDict, at: int | None) -> list[BaseEvent]:
        output = row.get("output")
        if output is None and row.get("error"):
            output = {"error": row["error"]}
        return [
            *self._call(step_id, str(row.get("name", "")), row.get("input") or {}, at),
            self._result(step_id, output, at),
        ]

    def _interrupt(self, pending: JsonDict, at: int | None) -> list[BaseEvent]:
        """A person must decide: the proposed call is announced, and this AG-UI run ends
        with an interrupt the client answers by resuming."""
        events = [*self._proposed(pending, at), self.snapshot(at)]
        outcome = RunFinishedInterruptOutcome(interrupts=[interrupt_of(pending)])
        events.append(self._end(outcome=outcome, at=at))
        return events

    def _proposed(self, pending: JsonDict, at: int | None) -> list[BaseEvent]:
        """The call an approval of an action is asked for, announced (no result: what runs
        after the decision is a call of its own)."""
        if pending.get("kind", "action") != "action":
            return []
        tool, arguments = str(pending.get("tool", "")), pending.get("arguments") or {}
        return self._call(str(pending["step_id"]), tool, arguments, at)

    def _finish(self, receipt: JsonDict) -> list[BaseEvent]:
        """The run has ended: its receipt says how."""
        outcome = str(receipt.get("outcome") or self._finished.get("status"))
        events = self._close_text()
        if outcome == "failed":
            self.ended = True
            error = receipt.get("error") or self._finished.get("error") or "the run failed"
            return [*events, RunErrorEvent(message=str(error), code="agentledger.failed")]
        usage = [
            TokenUsage(
                input_tokens=int(receipt.get("tokens_in") or 0),
                output_tokens=int(receipt.get("tokens_out") or 0),
                total_tokens=int(receipt.get("tokens_in") or 0)
                + int(receipt.get("tokens_out") or 0),
            )
        ]
        if outcome == "cancelled":
            return [*events, self._end(outcome=RunFinishedCancelledOutcome(), usage=usage)]
        result = {"answer": receipt.get("answer"), "run_id": self.run_id}
        return [*events, self._end(RunFinishedSuccessOutcome(), result=result, usage=usage)]

    def _end(
        self,
        outcome: RunFinishedSuccessOutcome
        | RunFinishedInterruptOutcome
        | RunFinishedCancelledOutcome,
        *,
        result: Any = None,
        usage: list[TokenUsage] | None = None,
        at: int | None = None,
    ) -> RunFinishedEvent:
        self.ended = True
        return RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.agui_run_id,
            outcome=outcome,
            result=result,
            usage=usage,
            timestamp=at,
        )
