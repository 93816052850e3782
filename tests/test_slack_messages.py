"""A notification as a Slack message (agentledger/core/slack_messages.py): the line people
read, the facts beside it, a button to the inbox item only when the door's address is
known, and Slack's limits and escaping kept."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentledger.core.notifications import inbox_item, notification
from agentledger.core.slack_messages import SECTION_CHARS, slack_message

AT = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def requested(**data: Any) -> dict[str, Any]:
    event = {
        "approval_id": "run-t~r1.s3",
        "kind": "action",
        "tool": "refund_order",
        "summary": "Refund $19.99 on order 42",
        "arguments": {"order_id": 42, "cents": 1999},
        "risk": "high",
        "required_role": "approver",
        "expires_at": "2026-12-06T09:00:00+00:00",
        **data,
    }
    told = notification(
        "approval.requested", event, tenant="t", run_id="run-t~r1", seq=4, at=AT, agent="refunds"
    )
    assert told is not None
    return told[1]


def button_urls(message: dict[str, Any]) -> list[str]:
    return [
        element["url"]
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    ]


def test_an_approval_reads_as_its_summary_agent_and_risk_with_a_link_to_its_card():
    body = requested()
    assert body["inbox"] == inbox_item("run-t~r1", "run-t~r1.s3")
    message = slack_message("approval.requested", body, "https://agents.example.com/")
    assert message["text"] == (
        "Approval needed: Refund $19.99 on order 42 (agent refunds, risk high)"
    )
    first, facts, actions = message["blocks"]
    assert first["type"] == "section" and "Refund $19.99 on order 42" in first["text"]["text"]
    shown = {
        field["text"].split("\n")[0]: field["text"].split("\n")[1] for field in facts["fields"]
    }
    assert shown["*Agent*"] == "refunds" and shown["*Risk*"] == "high"
    assert shown["*Run*"] == "run-t~r1"
    assert actions["type"] == "actions"
    assert button_urls(message) == [
        "https://agents.example.com/inbox#run=run-t~r1&approval=run-t~r1.s3"
    ]


def test_without_the_doors_address_the_message_has_no_link_and_says_where_to_decide():
    message = slack_message("approval.requested", requested(), None)
    assert button_urls(message) == []
    [note] = [block for block in message["blocks"] if block["type"] == "context"]
    assert "inbox" in note["elements"][0]["text"]


def test_a_call_without_a_summary_reads_as_its_tool_and_arguments_escaped_and_cut():
    body = requested(
        summary=None, tool="send_message", arguments={"to": "<a@b.c>", "x": "y" * 9000}
    )
    message = slack_message("approval.requested", body, None)
    line = message["blocks"][0]["text"]["text"]
    assert line.startswith('Approval needed: send_message with {"to": "&lt;a@b.c&gt;"')
    assert len(line) <= SECTION_CHARS
    assert len(message["text"]) < 400  # the call is cut, not the whole arguments


def test_run_ends_decisions_and_budget_alerts_each_read_as_one_line():
    ended = notification(
        "run.finished", {"status": "failed", "error": "boom"}, tenant="t", run_id="r", seq=9, at=AT
    )
    assert ended is not None and ended[0] == "run.failed"
    assert slack_message(*ended, None)["text"] == "Run r ended failed: boom"
    decided = notification(
        "approval.approved", {"by": "li"}, tenant="t", run_id="r", seq=5, at=AT, agent="a"
    )
    assert decided is not None
    assert slack_message(*decided, "https://x.example")["text"] == "Approved by li in run r"
    alert = {
        "event": "budget.warning",
        "tenant": "t",
        "subject": None,
        "period": "day",
        "mode": "enforcing",
        "limit_usd": 20.0,
        "spent_usd": 16.5,
        "spent_tokens": 1200,
        "share": 0.8,
    }
    message = slack_message("budget.warning", alert, None)
    assert message["text"] == "Budget warning: t's day budget is 80% spent"
    fields = [f["text"] for f in message["blocks"][1]["fields"]]
    assert "*Spent*\n$16.50, 1200 tokens" in fields and "*Limit*\n$20.00" in fields
