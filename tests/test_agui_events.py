"""The AG-UI mapping's endings that the real-stack test (tests/test_agui.py) does not reach:
a failed run, a cancelled one, and an approval that is not of a tool call. Each story is
checked against the protocol's types and its conformance rules (`ag-ui-validate`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentledger.core.results import WatchItem

ag_ui = pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is the serve extra")
from ag_ui.core import Event, RunAgentInput  # noqa: E402
from ag_ui_validate.pytest_plugin import validate_agui  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from agentledger.http.agui_events import AguiStory  # noqa: E402

EVENT: TypeAdapter[Any] = TypeAdapter(Event)
REQUEST = RunAgentInput(thread_id="th", run_id="r1", messages=[])
NOW = datetime(2026, 12, 4, tzinfo=UTC)


def event(seq: int, name: str, step_id: str | None = None, **data: Any) -> WatchItem:
    return WatchItem(kind="event", type=name, seq=seq, step_id=step_id, data=data, at=NOW)


def told(items: list[tuple[WatchItem, dict[str, Any] | None]]) -> list[Any]:
    """The story as a client reads it: each event through the wire and the package's types,
    the whole sequence through the conformance rules."""
    story = AguiStory(REQUEST, "run-x")
    wire = [story.started(REQUEST), story.snapshot()]
    for item, row in items:
        wire += story.translate(item, row)
    assert story.ended
    raw = [e.model_dump_json(by_alias=True) for e in wire]
    errors = [d for d in validate_agui(raw).diagnostics if d.severity == "error"]
    assert not errors, errors
    return [EVENT.validate_json(r) for r in raw]


def receipt(outcome: str, **fields: Any) -> WatchItem:
    data = {"outcome": outcome, "tokens_in": 5, "tokens_out": 7, **fields}
    return WatchItem(kind="receipt", type="receipt", data=data)


def test_a_failed_run_ends_in_run_error_after_its_text_and_calls() -> None:
    events = told(
        [
            (WatchItem(kind="text", type="model.text", step_id="0001-model_call", text="Hi"), None),
            (event(1, "step.completed", "0001-model_call", type="model_call"), None),
            (
                event(2, "step.failed", "0002-tool_call", type="tool_call"),
                {"name": "fetch_page", "input": {"url": "x"}, "output": None, "error": "404"},
            ),
            (event(3, "run.finished", status="failed", error="no page"), None),
            (receipt("failed", error="no page"), None),
        ]
    )
    kinds = [e.type.value for e in events]
    assert kinds[-1] == "RUN_ERROR" and events[-1].message == "no page"
    assert "TEXT_MESSAGE_END" in kinds and "RUN_FINISHED" not in kinds
    [result] = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert json.loads(result.content) == {"error": "404"}


def test_a_retried_model_call_streams_its_new_attempt_as_a_message_of_its_own_after_a_reset() -> (
    None
):
    def piece(text: str, attempt: int) -> WatchItem:
        step = "0001-model_call"
        return WatchItem(
            kind="text", type="model.text", step_id=step, data={"attempt": attempt}, text=text
        )

    reset = WatchItem(
        kind="text_reset",
        type="model.text_reset",
        step_id="0001-model_call",
        data={"attempt": 2, "replaces": 1},
    )
    events = told(
        [
            (piece("Refunds ov", 1), None),
            (reset, None),
            (piece("Refunds over $100", 2), None),
            (piece(" need approval.", 2), None),
            (event(1, "step.completed", "0001-model_call", type="model_call"), None),
            (receipt("completed", answer="Refunds over $100 need approval."), None),
        ]
    )
    texts: dict[str, str] = {}
    for e in events:
        if e.type.value == "TEXT_MESSAGE_CONTENT":
            texts[e.message_id] = texts.get(e.message_id, "") + e.delta
    assert texts == {
        "0001-model_call.text": "Refunds ov",
        "0001-model_call.text.2": "Refunds over $100 need approval.",
    }
    # The first attempt's message ends where the reset says its text is replaced.
    kinds = [(e.type.value, getattr(e, "name", None)) for e in events]
    end = kinds.index(("TEXT_MESSAGE_END", None))
    assert kinds[end + 1] == ("CUSTOM", "agentledger.model.text_reset")


def test_a_cancelled_run_finishes_cancelled_and_a_budget_approval_interrupts() -> None:
    events = told([(receipt("cancelled"), None)])
    assert events[-1].outcome.type == "cancelled"
    assert events[-1].usage[0].total_tokens == 12

    pending = {
        "kind": "budget",
        "approval_id": "0003-approval",
        "step_id": "0003-approval",
        "tool": "budget",
        "arguments": {"cost_usd": 2.5},
        "reason": "over the run's budget",
        "expires_at": (NOW + timedelta(hours=1)).isoformat(),
    }
    asked = WatchItem(
        kind="event", type="approval.requested", seq=4, step_id="0003-approval", data=pending
    )
    events = told([(asked, None)])
    [interrupt] = events[-1].outcome.interrupts
    assert (interrupt.reason, interrupt.tool_call_id) == ("agentledger.budget", None)
    assert "over the run's budget" in interrupt.message
    assert not [e for e in events if e.type.value.startswith("TOOL_CALL")]
