"""Pruning the mirror: forget what finished runs did, long after they finished.

Only runs that ended (completed, failed, cancelled) before the cutoff go, with every row
that describes them. A run that has not finished is never touched, however old. Kept on
purpose, whatever their age:
- `tool_ledger`: it is what stops a side effect from happening twice; a retry that finds its
  idempotency key there returns the recorded result instead of acting again;
- `outbox` and `tickets`: the side effects themselves (the demo's sent messages, tickets);
- `backlog_tasks`: a backlog's own record of its tasks.
Artifacts are addressed by content, so one row can serve a later run too: an artifact that
a kept run still refers to is handed to that run instead of deleted.
Nothing prunes on its own: `agentledger prune` does, when someone (or a cron job) runs it.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from agentledger.core.fleet_figures import PruneResult
from agentledger.core.states import TERMINAL

FINISHED = tuple(sorted(status.value for status in TERMINAL))

# Every table that describes a run, deleted in this order (there are no foreign keys).
PRUNED_TABLES = (
    "receipts",
    "artifacts",
    "events",
    "step_attempts",
    "steps",
    "conversation",
    "model_journal",
    "model_text",
    "secret_values",
    "eval_cases",  # an eval case's run: the recording it replayed, what answered each call
    "runs",
)

# Artifact ids a kept run refers to: in its steps' outputs and checkpoints, its receipt, its
# events, its conversation, its checkpoint, and (by content) its final answer.
REHOME_SHARED_ARTIFACTS = r"""
WITH bodies AS (
    SELECT run_id, output::text AS body FROM steps WHERE output IS NOT NULL
    UNION ALL SELECT run_id, checkpoint::text FROM steps
    UNION ALL SELECT run_id, receipt::text FROM receipts
    UNION ALL SELECT run_id, data::text FROM events
    UNION ALL SELECT run_id, message::text FROM conversation
    UNION ALL SELECT run_id, checkpoint::text FROM runs
), refs AS (
    SELECT run_id, (regexp_matches(body, 'sha256:[0-9a-f]{64}', 'g'))[1] AS artifact_id
    FROM bodies
    WHERE body LIKE '%sha256:%' AND run_id NOT IN (SELECT run_id FROM pruned_runs)
    UNION ALL
    SELECT run_id,
           'sha256:' || encode(sha256(convert_to(receipt->>'answer', 'UTF8')), 'hex')
    FROM receipts
    WHERE receipt->>'answer' IS NOT NULL AND run_id NOT IN (SELECT run_id FROM pruned_runs)
), heirs AS (
    SELECT artifact_id, min(run_id) AS run_id FROM refs GROUP BY artifact_id
)
UPDATE artifacts a SET run_id = heirs.run_id
FROM heirs
WHERE a.artifact_id = heirs.artifact_id AND a.run_id IN (SELECT run_id FROM pruned_runs)
"""


async def prune(
    pool: AsyncConnectionPool, *, cutoff: datetime, dry_run: bool, tenant: str | None = None
) -> PruneResult:
    """Delete every run that finished before `cutoff` (with `tenant`, that tenant's alone),
    in one transaction. A dry run does the same work and rolls it back, so its counts are
    exactly what a real run would delete."""
    deleted: dict[str, int] = {}
    kept_artifacts = 0
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("CREATE TEMP TABLE pruned_runs (run_id text PRIMARY KEY) ON COMMIT DROP")
        await conn.execute(
            """INSERT INTO pruned_runs
               SELECT run_id FROM runs
               WHERE status = ANY(%s) AND finished_at < %s
                 AND (%s::text IS NULL OR tenant = %s)
               FOR UPDATE""",
            (list(FINISHED), cutoff, tenant, tenant),
        )
        cur = await conn.execute(REHOME_SHARED_ARTIFACTS)
        kept_artifacts = cur.rowcount
        for table in PRUNED_TABLES:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE run_id IN (SELECT run_id FROM pruned_runs)").format(
                    sql.Identifier(table)
                )
            )
            deleted[table] = cur.rowcount
        if dry_run:
            raise psycopg.Rollback()  # leaves the block quietly, undoing everything above
    return PruneResult(
        cutoff=cutoff,
        dry_run=dry_run,
        tenant=tenant,
        runs=deleted.get("runs", 0),
        deleted=deleted,
        artifacts_kept_for_newer_runs=kept_artifacts,
    )
