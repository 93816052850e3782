"""Evals' rows: recorded runs read as recordings, and each case's run answered from its own.

A case's row holds the recording its run replays, which recorded call answered which step
(so a retried step gets the same answer), and the first divergence. The row is locked while a
call is matched, so two calls of one reply cannot take the same recorded call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.eval_cases import (
    Divergence,
    RecordedApproval,
    RecordedCall,
    Recording,
    ToolUse,
    match,
    next_unused,
)
from agentledger.core.spec import JsonDict
from agentledger.core.states import RunStatus, is_terminal

# A step a divergence answered: no recorded call is used up by it.
DIVERGED = -1


@dataclass
class Answer:
    """What the recording says to one tool call of a case's run."""

    recorded: RecordedCall | None  # None: the recording lacks this call
    divergence: Divergence | None  # the case's first divergence, if any yet
    live_read_only: bool


async def register(
    pool: AsyncConnectionPool,
    *,
    eval_id: str,
    cases: list[tuple[str, str, Recording]],
    live_read_only: bool,
) -> None:
    """Each case's recording (its run id, name, recording), before its run starts; a re-run
    of the eval keeps the first."""
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO eval_cases (run_id, eval_id, case_name, recording, live_read_only)
               VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING""",
            [
                (run_id, eval_id, name, Jsonb(recording.model_dump(mode="json")), live_read_only)
                for run_id, name, recording in cases
            ],
        )


async def answer(
    pool: AsyncConnectionPool, *, run_id: str, step_id: str, step: int, call: ToolUse
) -> Answer | None:
    """The recorded call that answers this step (the same one on every attempt), or the
    divergence it makes; None when the run is no eval case's."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            """SELECT recording, answered, divergence, live_read_only FROM eval_cases
               WHERE run_id = %s FOR UPDATE""",
            (run_id,),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        recording = Recording.model_validate(row[0])
        answered: dict[str, int] = dict(row[1])
        divergence = Divergence.model_validate(row[2]) if row[2] is not None else None
        live = bool(row[3])
        index = answered.get(step_id)
        if index is None:
            used = {i for i in answered.values() if i != DIVERGED}
            found = match(recording.calls, used, call.tool, call.arguments)
            index = DIVERGED if found is None else found
            answered[step_id] = index
            if found is None and divergence is None:
                divergence = Divergence(
                    step=step,
                    index=len(answered) - 1,
                    call=call,
                    recorded=next_unused(recording.calls, used),
                    stopped=not live,
                )
            await conn.execute(
                "UPDATE eval_cases SET answered = %s, divergence = %s WHERE run_id = %s",
                (
                    Jsonb(answered),
                    Jsonb(divergence.model_dump(mode="json")) if divergence else None,
                    run_id,
                ),
            )
        recorded = recording.calls[index] if index != DIVERGED else None
        return Answer(recorded, divergence, live)


async def divergence(pool: AsyncConnectionPool, run_id: str) -> Divergence | None:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT divergence FROM eval_cases WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    return Divergence.model_validate(row[0]) if row and row[0] is not None else None


async def watched(pool: AsyncConnectionPool, run_id: str) -> tuple[Divergence | None, bool]:
    """A case's divergence so far, and whether its run has ended (as the mirror says)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT (SELECT divergence FROM eval_cases WHERE run_id = %(id)s),
                      (SELECT status FROM runs WHERE run_id = %(id)s)""",
            {"id": run_id},
        )
        row = await cur.fetchone()
    assert row is not None  # one row, always
    found = Divergence.model_validate(row[0]) if row[0] is not None else None
    return found, row[1] is not None and is_terminal(RunStatus(row[1]))


async def finished_run_ids(
    pool: AsyncConnectionPool,
    *,
    agent: str | None,
    outcome: str | None,
    since: datetime | None,
    until: datetime | None,
    tenant: str | None,
    limit: int,
) -> list[str]:
    """Runs with a receipt that match, oldest first; eval cases' own runs never."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT r.run_id FROM runs r JOIN receipts USING (run_id)
               WHERE (%(agent)s::text IS NULL OR r.agent = %(agent)s)
                 AND (%(outcome)s::text IS NULL OR r.status = %(outcome)s)
                 AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s)
                 AND (%(until)s::timestamptz IS NULL OR r.created_at < %(until)s)
                 AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)
                 AND NOT EXISTS (SELECT 1 FROM eval_cases e WHERE e.run_id = r.run_id)
               ORDER BY r.created_at, r.run_id LIMIT %(limit)s""",
            {
                "agent": agent,
                "outcome": outcome,
                "since": since,
                "until": until,
                "tenant": tenant,
                "limit": limit,
            },
        )
        return [str(row[0]) for row in await cur.fetchall()]


async def recordings(
    pool: AsyncConnectionPool, run_ids: list[str], *, tenant: str | None
) -> dict[str, tuple[str, Recording]]:
    """Each run's task and recording, from its receipt and its tool steps; a run without a
    receipt (unfinished), or another tenant's, is left out."""
    async with pool.connection() as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            """SELECT r.run_id, r.task, r.agent, c.receipt
               FROM runs r JOIN receipts c USING (run_id)
               WHERE r.run_id = ANY(%(ids)s)
                 AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)""",
            {"ids": run_ids, "tenant": tenant},
        )
        runs = {row["run_id"]: row for row in await cur.fetchall()}
        await cur.execute(
            """SELECT run_id, seq, name, status, input, output, error FROM steps
               WHERE run_id = ANY(%s) AND type = 'tool_call' ORDER BY run_id, seq""",
            (list(runs),),
        )
        steps: dict[str, list[dict[str, Any]]] = {}
        for row in await cur.fetchall():
            steps.setdefault(row["run_id"], []).append(row)
    return {
        run_id: (
            row["task"],
            _recording(run_id, row["agent"], row["receipt"], steps.get(run_id, [])),
        )
        for run_id, row in runs.items()
    }


def _recording(
    run_id: str, agent: str, receipt: JsonDict, steps: list[dict[str, Any]]
) -> Recording:
    verification = receipt.get("verification") or {}
    return Recording(
        run_id=run_id,
        agent=agent,
        outcome=str(receipt.get("outcome")),
        calls=[
            RecordedCall(
                seq=s["seq"],
                tool=s["name"],
                arguments=s["input"] or {},
                ok=s["status"] == "completed",
                output=s["output"],
                error=s["error"],
            )
            for s in steps
        ],
        approvals=[
            RecordedApproval(
                tool=a["tool"],
                arguments=a.get("proposed_arguments") or {},
                decision=a["decision"],
                reason=a.get("reason"),
            )
            for a in receipt.get("approvals") or []
            if a.get("kind", "action") == "action"
        ],
        answer=receipt.get("answer"),
        verification_passed=verification.get("passed") if verification else None,
        tokens=int(receipt.get("tokens_in", 0)) + int(receipt.get("tokens_out", 0)),
        cost_usd=float(receipt.get("cost_usd", 0.0)),
    )
