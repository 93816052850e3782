"""`agentledger chat RUN`: talk with a run, a line at a time.

Each line read from stdin is said to the run (`client.sessions.chat`), and its answer is printed
as the model writes it. An approval the turn waits for is printed with the commands that
decide it; `/approve` or `/reject REASON` typed next decides it here (unsigned, in the role
it asks for). `/end` ends the session (`agentledger end`: it completes with its last answer
and its receipt) and leaves. `/exit` or the end of input leaves; the session itself stays
open until its idle timeout. Works the same with stdin piped. Exit 0, or 1 when a turn went
unanswered (no worker, silence) or the run ended other than completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_run, add_tenant, seconds
from agentledger.core.events import EventType

if TYPE_CHECKING:
    from agentledger import RunClient
    from agentledger.types import WatchItem

ANSWER_WITHIN_SECONDS = 300.0


def add_parser(command: Any) -> None:
    p: argparse.ArgumentParser = command(
        "chat", "talk with a run: each line read is said to it, and its answer printed"
    )
    add_run(p)
    p.add_argument("--by", default="cli", help="who speaks (shown in status and the receipt)")
    p.add_argument(
        "--answer-within",
        type=seconds,
        default=ANSWER_WITHIN_SECONDS,
        help="seconds a turn may go without a word from the run before chat says so "
        f"(default {ANSWER_WITHIN_SECONDS:g})",
    )
    add_tenant(p)


def out(text: str, *, end: str = "\n") -> None:
    from agentledger.cli import render

    print(render.for_terminal(text), end=end, flush=True)


class Turn:
    """What one turn printed, and how it ended."""

    def __init__(self) -> None:
        self.in_text = False
        self.streamed = False
        self.pending: dict[str, Any] | None = None
        self.next_offset = 0
        self.unanswered = False
        self.outcome: str | None = None

    def show(self, item: WatchItem, run_id: str, as_json: bool) -> None:
        if item.offset is not None:
            self.next_offset = item.offset + 1
        if item.type == EventType.CHAT_APPROVAL_PENDING:
            self.pending = item.data
            self.next_offset = int(item.data.get("next_offset", self.next_offset))
        elif item.type == EventType.CHAT_NO_ANSWER:
            self.unanswered = True
        elif item.type == EventType.RUN_FINISHED:
            self.outcome = self.outcome or item.data.get("status")
        elif item.kind == "receipt":
            self.outcome = item.data.get("outcome")
        if as_json:
            print(item.model_dump_json(), flush=True)
            return
        if item.kind == "text":
            out(item.text or "", end="")
            self.in_text = self.streamed = True
            return
        line = self.line(item, run_id)
        if line is None:
            return
        if self.in_text:
            print(flush=True)
            self.in_text = False
        out(line)

    def line(self, item: WatchItem, run_id: str) -> str | None:
        data = item.data
        if item.type == EventType.SESSION_TURN_ANSWERED:
            return None if self.streamed else str(data.get("answer") or "")
        if item.type == EventType.APPROVAL_REQUESTED:
            args = json.dumps(data.get("arguments"), default=str)
            return f"[approval needed: {data.get('tool')} {args}]"
        if item.type == EventType.CHAT_APPROVAL_PENDING:
            return f"[{data.get('note')}; or type /approve, or /reject REASON]"
        if item.type == EventType.CHAT_NO_ANSWER:
            print(f"note: {data.get('note')}", file=sys.stderr, flush=True)
            return None
        if item.type == EventType.RUN_FINISHED:
            error = f": {data['error']}" if data.get("error") else ""
            return f"[run {run_id} ended {data.get('status')}{error}]"
        if item.kind == "receipt":
            return f"[receipt: `agentledger receipt {run_id}`]"
        if item.kind == "text_reset":
            return "[the model call was retried: its reply starts again]"
        if item.type in (
            EventType.TOOL_REFUSED,
            EventType.MODEL_FALLBACK,
            EventType.RUN_PAUSED,
            EventType.RUN_NEEDS_ADMIN,
        ):
            return f"[{item.type}]"
        return None


async def read_line() -> str | None:
    """The next line of stdin, None at its end (read off the event loop)."""
    line = await asyncio.to_thread(sys.stdin.readline)
    return line if line else None


async def cmd_chat(client: RunClient, args: argparse.Namespace) -> int:
    run_id = args.run
    if sys.stdin.isatty() and not args.json:
        print(
            f"chatting with {run_id}: type a message; /end to end the session, /exit to leave",
            file=sys.stderr,
            flush=True,
        )
    pending: dict[str, Any] | None = None
    next_offset = 0
    while True:
        line = await read_line()
        if line is None or line.strip() == "/exit":
            break
        text = line.strip()
        if not text:
            continue
        if text == "/end":
            ended = await client.sessions.end(run_id, by=args.by)
            if args.json:
                print(json.dumps({"type": "chat.ended", **ended.model_dump(mode="json")}))
            else:
                out(f"[{ended.message}]")
            return 0
        follow_from: int | None = None
        if pending is not None and (text == "/approve" or text.startswith("/reject")):
            role = str(pending.get("required_role") or "approver")
            if text == "/approve":
                decided = await client.runs.approve(run_id, by=args.by, role=role)
            else:
                reason = text.removeprefix("/reject").strip() or "rejected in chat"
                decided = await client.runs.reject(run_id, by=args.by, role=role, reason=reason)
            if not args.json:
                out(f"[{decided.decision}: the run is {decided.status.value}]")
            follow_from = next_offset
        turn = Turn()
        items = client.sessions.chat(
            run_id,
            None if follow_from is not None else text,
            by=args.by,
            from_offset=follow_from or 0,
            answer_within=args.answer_within,
        )
        async for item in items:
            turn.show(item, run_id, args.json)
        if turn.in_text:
            print(flush=True)
        pending, next_offset = turn.pending, turn.next_offset
        if turn.unanswered:
            return 1
        if turn.outcome is not None:
            return 0 if turn.outcome == "completed" else 1
    return 0
