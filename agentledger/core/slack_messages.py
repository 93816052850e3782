"""A notification as a Slack incoming webhook takes it (pure): what a subscription made with
`format: slack` is sent instead of agentledger's own JSON body, signed the same way.

The message's `text` is the event in one line (an approval: the call in words as its tool
says it reads, the agent, the risk); Slack shows it in the alert and to clients that show no
blocks. Its `blocks` say the same: a section with that line, one with the facts as fields,
and, for an approval, a button to its card in the inbox. The button needs the door's address
as people reach it, which only the operator knows (AGENTLEDGER_PUBLIC_URL on the workers);
without it, the message has no link and says to decide in the inbox.

Slack's limits are kept here, so a long summary or error is cut rather than refused
(https://api.slack.com/reference/block-kit/blocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

SECTION_CHARS = 3000
FIELD_CHARS = 2000
TEXT_CHARS = 3000
CALL_CHARS = 200
BUTTON_TEXT = "Review in inbox"


def escaped(text: str) -> str:
    """`text` as Slack's mrkdwn shows it literally (its three control characters)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call(body: Mapping[str, Any]) -> str:
    """A call whose tool says nothing of how it reads: its name and arguments."""
    arguments = json.dumps(body.get("arguments") or {}, sort_keys=True, separators=(", ", ": "))
    return cut(f"{body.get('tool') or 'a tool'} with {arguments}", CALL_CHARS)


def _money(usd: Any) -> str:
    return f"${float(usd):,.2f}" if isinstance(usd, int | float) else ""


def headline(event: str, body: Mapping[str, Any]) -> str:
    """The notification in one line, as a person reads it."""
    run = body.get("run_id") or "?"
    if event == "approval.requested":
        line = f"Approval needed: {body.get('summary') or _call(body)}"
        facts = [f"agent {body['agent']}" if body.get("agent") else "", _risk(body)]
        shown = ", ".join(fact for fact in facts if fact)
        return f"{line} ({shown})" if shown else line
    if event == "approval.decided":
        decision = str(body.get("decision") or "decided")
        if decision == "expired":
            return f"Approval expired undecided in run {run}"
        line = f"{decision.capitalize()} by {body.get('by') or 'someone'} in run {run}"
        rule = body.get("standing_rule")
        return line + (f" (standing approval {rule})" if rule else "")
    if event == "run.finished":
        return f"Run {run} finished"
    if event == "run.failed":
        error = body.get("error")
        return f"Run {run} ended {body.get('status') or 'failed'}" + (f": {error}" if error else "")
    if event.startswith("budget."):
        share = body.get("share")
        used = f" is {float(share):.0%} spent" if isinstance(share, int | float) else ""
        whose = body.get("subject") or body.get("tenant") or "?"
        return (
            f"Budget {event.removeprefix('budget.')}: {whose}'s {body.get('period')} budget{used}"
        )
    return f"{event} in run {run}"


def _risk(body: Mapping[str, Any]) -> str:
    return f"risk {body['risk']}" if body.get("risk") else ""


def _facts(event: str, body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What a reader checks besides the headline, label and value."""
    if event.startswith("budget."):
        spent = [_money(body.get("spent_usd")), f"{body.get('spent_tokens') or 0} tokens"]
        tokens = body.get("limit_tokens")
        limit = [_money(body.get("limit_usd")), f"{tokens} tokens" if tokens else ""]
        return [
            ("Tenant", body.get("tenant")),
            ("Mode", body.get("mode")),
            ("Spent", ", ".join(each for each in spent if each)),
            ("Limit", ", ".join(each for each in limit if each)),
        ]
    facts: list[tuple[str, Any]] = [("Agent", body.get("agent")), ("Tenant", body.get("tenant"))]
    if event == "approval.requested":
        facts += [
            ("Risk", body.get("risk")),
            ("Tool", body.get("tool")),
            ("Role", body.get("required_role")),
            ("Expires", body.get("expires_at")),
        ]
    return [*facts, ("Run", body.get("run_id"))]


def slack_message(event: str, body: Mapping[str, Any], public_url: str | None) -> dict[str, Any]:
    """The Slack message for a notification `event` with agentledger's `body`; the inbox
    link is `public_url` (the door's address) and the body's inbox path, if both are known."""
    line = headline(event, body)
    fields = [
        {"type": "mrkdwn", "text": cut(f"*{label}*\n{escaped(str(value))}", FIELD_CHARS)}
        for label, value in _facts(event, body)
        if value not in (None, "")
    ][:10]  # a section holds ten fields at most
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": cut(escaped(line), SECTION_CHARS)}}
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    inbox = body.get("inbox")
    if event == "approval.requested" and isinstance(inbox, str):
        if public_url:
            button = {
                "type": "button",
                "text": {"type": "plain_text", "text": BUTTON_TEXT},
                "url": public_url.rstrip("/") + inbox,
                "action_id": "agentledger.open_inbox",
                "style": "primary",
            }
            blocks.append({"type": "actions", "elements": [button]})
        else:
            note = "Decide it in agentledger's inbox (`/inbox` on the HTTP door)."
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": note}]})
    return {"text": cut(escaped(line), TEXT_CHARS), "blocks": blocks}
