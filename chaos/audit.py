"""The promise, checked after the chaos: nothing lost, nothing done twice, mirror = history.

For each run: it ended as expected; its mirror rows match what its Temporal history
accepted, row by row (`agentledger.client.projection`); it has its receipt; each side effect
happened exactly once (the idempotency ledger, the outbox and the ticket desk agree); and no
model answer that had arrived was paid for a second time (one journal entry per model step).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.client import projection
from chaos.lab import SUBAGENT_RUNS

EFFECTS_PER_RUN = {"create_ticket": 1, "send_message": 1}
# Runs checked against their histories at once: a thousand runs one by one take minutes.
CHECKS_AT_ONCE = 4


@dataclass
class Audit:
    runs: int = 0
    completed: int = 0
    differences: Counter[str] = field(default_factory=Counter)
    duplicate_effects: int = 0
    missing_effects: int = 0
    paid_twice: int = 0
    missing_receipts: int = 0
    overlapping_calls: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


async def _rows(pool: AsyncConnectionPool, sql: str, run_ids: list[str]) -> list[tuple]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, (run_ids,))
        return list(await cur.fetchall())


async def audit(
    client: Client,
    pool: AsyncConnectionPool,
    run_ids: list[str],
    effects: Mapping[str, Mapping[str, int]] | None = None,
) -> Audit:
    """Every run in `run_ids`; each must have done the effects `effects` names for it (by
    default `EFFECTS_PER_RUN`), once each, and no other."""
    result = Audit(runs=len(run_ids))
    effects = effects or {}
    gate = asyncio.Semaphore(CHECKS_AT_ONCE)

    async def against_history(run_id: str) -> None:
        async with gate:
            description = await client.get_workflow_handle(run_id).describe()
            if description.status == WorkflowExecutionStatus.COMPLETED:
                result.completed += 1
            else:
                status = description.status.name if description.status else "?"
                result.problem(f"{run_id} ended {status}")
            for difference in await projection.check(client, pool, run_id):
                result.differences[difference.kind] += 1
                result.problem(f"{run_id}: {difference}")

    await asyncio.gather(*(against_history(run_id) for run_id in run_ids))

    # Every run that ended says how in its receipt.
    receipted = {
        row[0]
        for row in await _rows(pool, "SELECT run_id FROM receipts WHERE run_id = ANY(%s)", run_ids)
    }
    for run_id in run_ids:
        if run_id not in receipted:
            result.missing_receipts += 1
            result.problem(f"{run_id}: no receipt")

    # Exactly once: one ledger entry per effect, done, and one row in the system it changed.
    ledger = await _rows(
        pool,
        """SELECT l.run_id, l.tool, l.status,
                  (SELECT count(*) FROM outbox o WHERE o.idempotency_key = l.idempotency_key)
                + (SELECT count(*) FROM tickets t WHERE t.external_key = l.idempotency_key)
           FROM tool_ledger l WHERE l.run_id = ANY(%s)""",
        run_ids,
    )
    done_by: Counter[tuple[str, str]] = Counter()
    for run_id, tool, status, rows in ledger:
        done_by[(run_id, tool)] += 1
        if status != "done":
            result.problem(f"{run_id}: {tool} ledger entry is {status!r}")
        if rows != 1:
            result.duplicate_effects += max(rows - 1, 0)
            result.missing_effects += rows == 0
            result.problem(f"{run_id}: {tool} changed {rows} rows in its system")
    for run_id in run_ids:
        wanted = effects.get(run_id, EFFECTS_PER_RUN)
        for tool in EFFECTS_PER_RUN:
            done, expected = done_by[(run_id, tool)], wanted.get(tool, 0)
            if done != expected:
                result.missing_effects += done < expected
                result.duplicate_effects += max(done - expected, 0)
                result.problem(f"{run_id}: {done} ledger entries for {tool}, not {expected}")
    # Effects the ledger does not know of would be duplicates too.
    strays = await _rows(
        pool,
        """SELECT run_id, count(*) FROM outbox o WHERE run_id = ANY(%s) AND NOT EXISTS
               (SELECT 1 FROM tool_ledger l WHERE l.idempotency_key = o.idempotency_key)
           GROUP BY run_id""",
        run_ids,
    )
    for run_id, count in strays:
        result.duplicate_effects += count
        result.problem(f"{run_id}: {count} messages sent outside the ledger")

    # A later attempt that began after an earlier one's answer was journaled must have
    # reused it. Two attempts that overlapped (the first's heartbeat lapsed while its call
    # was in flight) may both pay: no answer had arrived yet. Those are counted, not failed.
    paid = await _rows(
        pool,
        """SELECT later.run_id, later.step_id, a.started_at > earlier.created_at
           FROM model_journal earlier
           JOIN model_journal later USING (run_id, step_id, model)
           JOIN step_attempts a ON a.run_id = later.run_id AND a.step_id = later.step_id
                               AND a.attempt = later.attempt
           WHERE earlier.run_id = ANY(%s) AND later.attempt > earlier.attempt""",
        run_ids,
    )
    for run_id, step_id, after_answer in paid:
        if after_answer:
            result.paid_twice += 1
            result.problem(f"{run_id}: model step {step_id} was paid again after its answer")
        else:
            result.overlapping_calls += 1
    return result


async def children_of(pool: AsyncConnectionPool, parents: list[str]) -> dict[str, str]:
    """Sub-agents' runs, each with the parent whose receipt names it."""
    rows = await _rows(
        pool,
        """SELECT run_id, jsonb_array_elements_text(receipt->'children') FROM receipts
           WHERE run_id = ANY(%s) AND jsonb_typeof(receipt->'children') = 'array'""",
        parents,
    )
    return {child: parent for parent, child in rows}


async def orphans(pool: AsyncConnectionPool, children: Mapping[str, str]) -> list[str]:
    """Sub-agents' runs no parent's receipt names, or whose own receipt names another
    parent (their parents' ends are audited with the parents)."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT run_id FROM runs WHERE run_id LIKE %s", (SUBAGENT_RUNS,))
        mirrored = [row[0] for row in await cur.fetchall()]
    named = {
        row[0]: row[1]
        for row in await _rows(
            pool,
            "SELECT run_id, receipt->>'parent_run_id' FROM receipts WHERE run_id = ANY(%s)",
            list(children),
        )
    }
    found = [
        f"{run_id}: a sub-agent's run no parent names"
        for run_id in mirrored
        if run_id not in children
    ]
    found += [
        f"{child}: its receipt names parent {named.get(child)!r}, not {parent}"
        for child, parent in children.items()
        if named.get(child) != parent
    ]
    return found
