"""`client.sessions`: converse with a session run (spec `session`) and end it on purpose
(docs/steering.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentledger.core.results import ControlResult, WatchItem
from agentledger.ops import chat_ops, steering_ops
from agentledger.services.client_session import ClientSession


class Sessions:
    """The caller's session runs: a turn at a time, until one of them ends it."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    def chat(
        self,
        run_id: str,
        message: str | None,
        *,
        by: str = "cli",
        from_offset: int = 0,
        wait: float | None = None,
        answer_within: float = chat_ops.ANSWER_WITHIN_SECONDS,
    ) -> AsyncIterator[WatchItem]:
        """Say `message` to the run and follow it until it has answered: its events and model
        text, ending with a session's `session.turn_answered` (or the run's end and receipt).
        Ends early, saying why, with `chat.approval_pending` (decide, then follow on with
        `message=None, from_offset=` its `next_offset`) or `chat.no_answer` (no worker took
        the message, or nothing came for `answer_within` seconds)."""
        return self._chat(run_id, message, by, from_offset, self.session.bound(wait), answer_within)

    async def _chat(
        self,
        run_id: str,
        message: str | None,
        by: str,
        from_offset: int,
        wait: float,
        answer_within: float,
    ) -> AsyncIterator[WatchItem]:
        items = chat_ops.chat(
            await self.session.temporal(wait),
            run_id,
            message,
            by=by,
            from_offset=from_offset,
            wait=wait,
            answer_within=answer_within,
            tenant=self.session.tenant,
            mirror=await self.session.mirror(),
        )
        async for item in items:
            yield item

    async def end(
        self, run_id: str, *, by: str = "cli", wait: float | None = None
    ) -> ControlResult:
        """End a session on purpose: it completes with its last answer and its receipt, at
        once when idle, else after its current turn (kept while no worker runs). Refused for
        a run that is not a session, or has ended."""
        return await self.session.act(steering_ops.end_session, run_id, by=by, wait=wait)
