"""Fleet figures from the Postgres mirror: what a completed run costs, how often runs finish,
fail, retry, wait for people and recover, over the runs started since a point in time.

The definitions live in the views of migration 5 (`metrics_runs`, `metrics_calls`,
`metrics_approval_waits`, and the all-time `metrics_tool_failures` and
`metrics_model_failures`); this module only aggregates them, so `agentledger stats` and
anyone writing SQL get the same figures.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentledger.core.fleet_figures import ModelFailures, Stats, ToolFailures

WINDOW = (
    "(%(since)s::timestamptz IS NULL OR {column} >= %(since)s::timestamptz) AND "
    "(%(tenant)s::text IS NULL OR run_id IN (SELECT run_id FROM runs WHERE tenant = %(tenant)s))"
)

RUNS_SQL = f"""
SELECT count(*) AS runs_started,
       count(*) FILTER (WHERE finished) AS runs_finished,
       count(*) FILTER (WHERE status = 'completed') AS runs_completed,
       count(*) FILTER (WHERE status = 'failed') AS runs_failed,
       count(*) FILTER (WHERE status = 'cancelled') AS runs_cancelled,
       coalesce(sum(cost_usd), 0) AS cost_total_usd,
       coalesce(sum(cost_usd) FILTER (WHERE finished), 0) AS finished_cost_usd,
       avg(cost_usd) FILTER (WHERE status = 'completed') AS completed_run_cost_avg_usd,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_seconds)
           FILTER (WHERE finished) AS duration_median_seconds,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_seconds)
           FILTER (WHERE finished) AS duration_p95_seconds,
       coalesce(sum(retries), 0)::bigint AS retries,
       count(*) FILTER (WHERE retries > 0) AS runs_retried,
       coalesce(sum(lost_attempts), 0)::bigint AS lost_attempts,
       count(*) FILTER (WHERE lost_attempts > 0) AS runs_recovered,
       coalesce(sum(duplicates_prevented), 0)::bigint AS duplicates_prevented
FROM metrics_runs WHERE {WINDOW.format(column="created_at")}
"""

APPROVALS_SQL = f"""
SELECT count(*) FILTER (WHERE decision IN ('approved', 'rejected')) AS approvals_decided,
       count(*) FILTER (WHERE decision = 'expired') AS approvals_expired,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY wait_seconds)
           FILTER (WHERE decision IN ('approved', 'rejected')) AS approval_wait_median_seconds,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY wait_seconds)
           FILTER (WHERE decision IN ('approved', 'rejected')) AS approval_wait_p95_seconds
FROM metrics_approval_waits WHERE {WINDOW.format(column="run_created_at")}
"""

CALLS_SQL = f"""
SELECT type, name, count(*) AS calls, sum(failed_attempts)::bigint AS failed_attempts,
       count(*) FILTER (WHERE failed) AS failed_calls
FROM metrics_calls WHERE {WINDOW.format(column="run_created_at")}
GROUP BY type, name
ORDER BY sum(failed_attempts) + count(*) FILTER (WHERE failed) DESC, name
"""


RUN_COUNTS = (
    "runs_started",
    "runs_finished",
    "runs_completed",
    "runs_failed",
    "runs_cancelled",
    "retries",
    "runs_retried",
    "lost_attempts",
    "runs_recovered",
    "duplicates_prevented",
)


# Model calls of models with no known price (the run records `"priced": false` on the step):
# their cost is unknown, and not counted in the figures above.
UNPRICED_SQL = f"""
SELECT name, count(*) AS calls FROM steps
WHERE type = 'model_call' AND final AND output->>'priced' = 'false'
  AND {WINDOW.format(column="started_at")}
GROUP BY name ORDER BY name
"""


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


async def stats(
    pool: AsyncConnectionPool, *, since: datetime | None = None, tenant: str | None = None
) -> Stats:
    """The figures over every tenant's runs, or with `tenant` over that tenant's only."""
    params = {"since": since, "tenant": tenant}
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(RUNS_SQL, params)
        runs: dict[str, Any] = await cur.fetchone() or {}
        await cur.execute(APPROVALS_SQL, params)
        approvals: dict[str, Any] = await cur.fetchone() or {}
        await cur.execute(CALLS_SQL, params)
        calls = await cur.fetchall()
        await cur.execute(UNPRICED_SQL, params)
        unpriced = await cur.fetchall()
    counts = {k: int(runs[k]) for k in RUN_COUNTS}
    finished, completed = counts["runs_finished"], counts["runs_completed"]
    return Stats(
        since=since,
        cost_per_completed_run_usd=_ratio(float(runs["finished_cost_usd"]), completed),
        completed_run_cost_avg_usd=runs["completed_run_cost_avg_usd"],
        finished_cost_usd=float(runs["finished_cost_usd"]),
        cost_total_usd=float(runs["cost_total_usd"]),
        runs_live=counts["runs_started"] - finished,
        completion_rate=_ratio(completed, finished),
        failure_rate=_ratio(counts["runs_failed"], finished),
        duration_median_seconds=runs["duration_median_seconds"],
        duration_p95_seconds=runs["duration_p95_seconds"],
        retries_per_run=_ratio(counts["retries"], counts["runs_started"]),
        **counts,
        **approvals,
        tool_failures=[
            ToolFailures(tool=c["name"], **_call_counts(c))
            for c in calls
            if c["type"] == "tool_call"
        ],
        model_failures=[
            ModelFailures(model=c["name"], **_call_counts(c))
            for c in calls
            if c["type"] == "model_call"
        ],
        unpriced_model_calls=sum(int(u["calls"]) for u in unpriced),
        unpriced_models=[u["name"] for u in unpriced],
    )


def _call_counts(row: dict[str, Any]) -> dict[str, int]:
    return {k: int(row[k]) for k in ("calls", "failed_attempts", "failed_calls")}
