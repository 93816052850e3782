"""A run as the Postgres mirror last saw it: what commands show when no worker answers.

The mirror is written at every step boundary, so it lags the workflow by at most the step in
flight; whatever reads it says so (`"source": "mirror"`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentledger.core.listings import ENGINE_RUN_PREFIXES
from agentledger.core.results import ChildApproval, PendingApproval, RunState, StepSummary

RUN_SQL = """
SELECT run_id, status, tenant, agent, priority, user_id AS user, task, current_step_id,
       pause_reason, checkpoint, tokens_in, tokens_out, cost_usd::float8 AS cost_usd, result,
       error, updated_at
FROM runs WHERE run_id = %s
"""
STEPS_SQL = """
SELECT step_id, seq, type, name, status, attempt FROM steps WHERE run_id = %s ORDER BY seq
"""
# The approval still waiting, as it stands: its request, or the latest approval counted of
# several it needs, for a step the mirror has not seen decided.
PENDING_SQL = """
SELECT e.data FROM events e JOIN steps s ON s.run_id = e.run_id AND s.step_id = e.step_id
WHERE e.run_id = %s AND e.type IN ('approval.requested', 'approval.counted')
  AND s.status = 'waiting'
ORDER BY e.seq DESC LIMIT 1
"""
# The sub-agent runs a run started (each names its run in its `subagent.started` event).
CHILDREN_SQL = """
SELECT DISTINCT data->>'run_id' AS run_id FROM events
WHERE run_id = %s AND type = 'subagent.started' AND data->>'run_id' IS NOT NULL
"""


async def run_tenant(pool: AsyncConnectionPool, run_id: str) -> str | None:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT tenant FROM runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    return None if row is None else str(row[0])


async def run_state(pool: AsyncConnectionPool, run_id: str) -> tuple[RunState, datetime] | None:
    """The run's state as mirrored, and when the mirror last changed; None if never mirrored."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(RUN_SQL, (run_id,))
        run = await cur.fetchone()
        if run is None:
            return None
        await cur.execute(STEPS_SQL, (run_id,))
        steps = [StepSummary.model_validate(row) for row in await cur.fetchall()]
        await cur.execute(PENDING_SQL, (run_id,))
        pending = await cur.fetchone()
        children = await _child_approvals(cur, run_id)
    updated_at = run.pop("updated_at")
    state = RunState.model_validate(
        {
            **run,
            "steps": steps,
            "pending_approval": PendingApproval.model_validate(pending["data"])
            if pending
            else None,
            "pause_requested": False,
            "child_approvals": children,
        }
    )
    return state, updated_at


async def _child_approvals(cur: Any, run_id: str) -> list[ChildApproval]:
    """The approvals the run's sub-agents (and theirs, all the way down) wait for, as their
    own mirrors show them: what the live state lists, read with no worker up."""
    found: list[ChildApproval] = []
    seen = {run_id}
    parents = [run_id]
    while parents:
        children: list[str] = []
        for parent in parents:
            await cur.execute(CHILDREN_SQL, (parent,))
            children += [r["run_id"] for r in await cur.fetchall() if r["run_id"] not in seen]
        seen.update(children)
        for child in children:
            await cur.execute(PENDING_SQL, (child,))
            pending = await cur.fetchone()
            if pending:
                found.append(
                    ChildApproval(
                        run_id=child, approval=PendingApproval.model_validate(pending["data"])
                    )
                )
        parents = children
    return found


# Every run of a tenant that waits for a person, with the approval it waits for: an inbox.
INBOX_SQL = """
SELECT r.run_id, r.user_id AS "user", r.task, r.tenant, e.data AS approval
FROM runs r
JOIN LATERAL (
    SELECT e.data FROM events e JOIN steps s ON s.run_id = e.run_id AND s.step_id = e.step_id
    WHERE e.run_id = r.run_id AND s.status = 'waiting'
      AND e.type IN ('approval.requested', 'approval.counted')
    ORDER BY e.seq DESC LIMIT 1
) e ON true
WHERE r.status = 'waiting_for_approval' AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)
ORDER BY r.updated_at DESC LIMIT %(limit)s
"""
# The steps each listed run took before the approval it waits for, the last few of each.
EVIDENCE_SQL = """
SELECT run_id, step_id, type, name, status, input, output, error FROM (
    SELECT s.run_id, s.step_id, s.seq, s.type, s.name, s.status, s.input, s.output, s.error,
           row_number() OVER (PARTITION BY s.run_id ORDER BY s.seq DESC) AS back
    FROM unnest(%(runs)s::text[], %(steps)s::text[]) AS w(run_id, step_id)
    JOIN steps a ON a.run_id = w.run_id AND a.step_id = w.step_id
    JOIN steps s ON s.run_id = w.run_id AND s.seq < a.seq
    WHERE s.type <> 'approval'
) before WHERE back <= %(last)s ORDER BY run_id, seq
"""
# How many steps before an approval its evidence shows, and how much of each step's
# input or output.
EVIDENCE_STEPS = 8
EVIDENCE_CHARS = 2000
# A run's steps as its timeline shows them, and how much of each step's input or output.
TIMELINE_SQL = """
SELECT s.step_id, s.seq, s.type, s.name, s.status, s.attempt, s.input, s.output, s.error,
       s.tokens_in, s.tokens_out, s.cost_usd::float8 AS cost_usd, s.started_at, s.finished_at
FROM steps s JOIN runs r USING (run_id)
WHERE s.run_id = %(run)s AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)
ORDER BY s.seq LIMIT %(limit)s
"""
TIMELINE_CHARS = 20_000
STEP_ROW_SQL = """
SELECT s.step_id, s.type, s.name, s.status, s.input, s.output, s.error
FROM steps s JOIN runs r USING (run_id)
WHERE s.run_id = %(run)s AND s.step_id = %(step)s
  AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s)
"""


async def pending_approvals(
    pool: AsyncConnectionPool, *, tenant: str | None, limit: int = 100
) -> list[dict[str, Any]]:
    """The approvals runs wait for (`tenant`'s alone, with one), newest first: each run's
    id, who it is for, its task, and the approval as the run asked for it."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(INBOX_SQL, {"tenant": tenant, "limit": limit})
        rows = await cur.fetchall()
        approvals = [PendingApproval.model_validate(row["approval"]) for row in rows]
        await cur.execute(
            EVIDENCE_SQL,
            {
                "runs": [row["run_id"] for row in rows],
                "steps": [a.step_id for a in approvals],
                "last": EVIDENCE_STEPS,
            },
        )
        evidence: dict[str, list[dict[str, Any]]] = {}
        for step in await cur.fetchall():
            run_id = step.pop("run_id")
            step["input"], step["output"] = _cut(step["input"]), _cut(step["output"])
            evidence.setdefault(run_id, []).append(step)
    found = []
    for row, pending in zip(rows, approvals, strict=True):
        requester = pending.requester.model_dump(mode="json") if pending.requester else None
        found.append(
            {
                **row,
                "approval": pending.model_dump(mode="json"),
                "requester": requester,
                "evidence": evidence.get(row["run_id"], []),
            }
        )
    return found


def _cut(value: Any, chars: int = EVIDENCE_CHARS) -> Any:
    """A step's input or output as evidence shows it: whole, or its JSON text cut short."""
    text = json.dumps(value)
    return value if len(text) <= chars else text[: chars - 1] + "…"


async def timeline(
    pool: AsyncConnectionPool, run_id: str, *, tenant: str | None, limit: int
) -> list[dict[str, Any]]:
    """The run's first `limit` steps as mirrored, in order: each with what it took and
    gave (cut short as evidence is, a little longer) and what it cost; none for another
    tenant's run."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(TIMELINE_SQL, {"run": run_id, "tenant": tenant, "limit": limit})
        found = await cur.fetchall()
    for step in found:
        step["input"] = _cut(step["input"], TIMELINE_CHARS)
        step["output"] = _cut(step["output"], TIMELINE_CHARS)
    return found


async def step_row(
    pool: AsyncConnectionPool, run_id: str, step_id: str, *, tenant: str | None
) -> dict[str, Any] | None:
    """One step as mirrored (its input, output or error); None if the mirror has not seen it
    (or the run is another tenant's)."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(STEP_ROW_SQL, {"run": run_id, "step": step_id, "tenant": tenant})
        return await cur.fetchone()


async def recent_runs(
    pool: AsyncConnectionPool,
    *,
    status: str | None,
    limit: int,
    tenant: str | None,
    engines_own: bool = True,
    agent: str | None = None,
    since: datetime | None = None,
) -> list[dict[str, Any]]:
    """Recent runs, newest first; with `tenant`, that tenant's only; with `agent`, that
    agent's; with `since`, those started since; without `engines_own`, not the runs the
    engine started for its own work (ENGINE_RUN_PREFIXES)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT run_id, status, tenant, agent, priority, user_id, task, current_step_id,
                      tokens_in, tokens_out, cost_usd::float, duplicates_prevented, created_at,
                      finished_at
               FROM runs WHERE (%(status)s::text IS NULL OR status = %(status)s)
                 AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
                 AND (%(agent)s::text IS NULL OR agent = %(agent)s)
                 AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
                 AND (%(engines_own)s OR NOT run_id LIKE ANY(%(prefixes)s))
               ORDER BY created_at DESC LIMIT %(limit)s""",
            {
                "status": status,
                "limit": limit,
                "tenant": tenant,
                "agent": agent,
                "since": since,
                "engines_own": engines_own,
                "prefixes": [f"{prefix}%" for prefix in ENGINE_RUN_PREFIXES],  # none has _ or %
            },
        )
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]


async def receipt(
    pool: AsyncConnectionPool, run_id: str, *, tenant: str | None
) -> tuple[dict[str, Any] | None, str | None] | None:
    """The run's receipt (None until it ends) and its status; None for a run the mirror has
    not seen (with `tenant`: or another tenant's)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT r.receipt FROM receipts r LEFT JOIN runs USING (run_id)
               WHERE run_id = %(run)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)""",
            {"run": run_id, "tenant": tenant},
        )
        row = await cur.fetchone()
        if row is not None:
            return dict(row[0]), None
        cur = await conn.execute(
            """SELECT status FROM runs
               WHERE run_id = %(run)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)""",
            {"run": run_id, "tenant": tenant},
        )
        run = await cur.fetchone()
    return None if run is None else (None, str(run[0]))
