"""Recovery: a worker killed with SIGKILL mid step, measured from the kill to the retry.

Workers here are `agentledger-worker` processes (`python -m chaos.faulty_worker`, which arms a
fault plan). A survivor runs all along;
one "doomed" worker at a time runs with AGENTLEDGER_FAULTS=tool.after_effect:send_message, so
it SIGKILLs itself right after the message's effect commits, before it can report. Each run
is the demo task (search the notes, then send a message behind an approval). When the doomed
worker takes the send_message step it dies; we time from its death (the parent sees the
exit) to the retried attempt's start (`step_attempts.started_at` of attempt 2 in Postgres).
When the survivor takes the step, nothing dies: that run is counted as a miss. At the end
every run's outbox must hold exactly one message.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.core.errors import OperationError
from agentledger.core.spec import RunSpec
from agentledger.workflows import AgentRunWorkflow
from bench.harness import WorkerProcess
from bench.stats import summarize
from tests import client_ops as ops

TASK = "Look up our refund policy and notify ana@example.com about it."
FAULT = "tool.after_effect:send_message"


def worker_process(env: dict[str, str], identity: str, faults: str = "") -> WorkerProcess:
    return WorkerProcess(
        [sys.executable, "-m", "chaos.faulty_worker", "--demo", "--identity", identity],
        {**env, "AGENTLEDGER_FAULTS": faults},
    )


async def _rows(pool: AsyncConnectionPool, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        return list(await cur.fetchall())


async def _send_attempts(pool: AsyncConnectionPool, run_id: str) -> list[tuple[Any, ...]]:
    """(attempt, worker, status, started_at epoch) of the run's send_message step."""
    return await _rows(
        pool,
        """SELECT a.attempt, a.worker, a.status, extract(epoch FROM a.started_at)::float8
           FROM step_attempts a JOIN steps s USING (run_id, step_id)
           WHERE a.run_id = %s AND s.name = 'send_message' ORDER BY a.attempt""",
        run_id,
    )


async def _approve_when_waiting(client: Client, run_id: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            await ops.approve(client, run_id, by="bench", role="approver")
            return
        except OperationError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def measure(
    client: Client,
    pool: AsyncConnectionPool,
    env: dict[str, str],
    *,
    kills: int,
    heartbeat_seconds: float,
    budget_seconds: float,
    log: Any = print,
) -> dict[str, Any]:
    queue = f"bench-recovery-{uuid.uuid4().hex[:8]}"
    env = {**env, "AGENTLEDGER_TASK_QUEUE": queue}
    survivor = worker_process(env, "survivor")
    await survivor.start(ready_line="polling")
    doomed: WorkerProcess | None = None
    samples: list[float] = []
    runs: list[str] = []
    killed_runs: list[str] = []
    misses = 0
    errors: list[str] = []
    deadline = time.monotonic() + budget_seconds
    n = 0
    try:
        while len(samples) < kills and time.monotonic() < deadline and n < kills * 4:
            n += 1
            began = time.monotonic()
            if doomed is None:
                doomed = worker_process(env, f"doomed-{n}", FAULT)
                await doomed.start(ready_line="polling")
            spawned = time.monotonic() - began
            spec = RunSpec(
                task=TASK,
                idempotency_key=f"bench-recovery-{queue}-{n}",
                timeouts={"heartbeat_seconds": heartbeat_seconds, "initial_retry_seconds": 0.2},
            )
            run_id = (await ops.start_run(client, spec, task_queue=queue)).run_id
            runs.append(run_id)
            await _approve_when_waiting(client, run_id)
            # Who took the send_message step: the doomed worker (it dies) or the survivor?
            verdict = None
            step_deadline = time.monotonic() + 30
            while verdict is None and time.monotonic() < step_deadline:
                if doomed.exited_at is not None:
                    verdict = "killed"
                    break
                attempts = await _send_attempts(pool, run_id)
                if any(a[0] == 1 and a[1] == "survivor" and a[2] != "running" for a in attempts):
                    verdict = "miss"
                    break
                await asyncio.sleep(0.02)
            if verdict != "killed":
                misses += 1
                log(f"  run {n}: the survivor took the step (a miss; not a sample)")
                continue
            killed_at = doomed.exited_at
            assert killed_at is not None
            doomed = None
            killed_runs.append(run_id)
            retry_deadline = time.monotonic() + heartbeat_seconds + 30
            retried = None
            while retried is None and time.monotonic() < retry_deadline:
                attempts = await _send_attempts(pool, run_id)
                retried = next((a for a in attempts if a[0] >= 2), None)
                if retried is None:
                    await asyncio.sleep(0.02)
            if retried is None:
                errors.append(f"{run_id}: no second attempt within {heartbeat_seconds + 30:.0f}s")
                continue
            samples.append(retried[3] - killed_at)
            log(
                f"  kill {len(samples)}/{kills}: step retried {retried[3] - killed_at:.2f}s "
                f"after the kill (iteration {time.monotonic() - began:.1f}s"
                + (f", of which worker start {spawned:.1f}s)" if spawned > 0.05 else ")")
            )

        # Every run must finish, each with exactly one message sent.
        async def finish(run_id: str) -> str:
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            try:
                result = await asyncio.wait_for(handle.result(), 90)
                return str(result.status.value)
            except Exception as err:  # reported, not raised: a benchmark prints what it saw
                return f"error: {type(err).__name__}: {err}"

        waited = time.monotonic()
        outcomes = await asyncio.gather(*(finish(r) for r in runs))
        log(f"  all {len(runs)} runs ended {time.monotonic() - waited:.1f}s later")
        sent = dict(
            await _rows(
                pool,
                "SELECT run_id, count(*) FROM outbox WHERE run_id = ANY(%s) GROUP BY run_id",
                runs,
            )
        )
        prevented = dict(
            await _rows(
                pool,
                """SELECT run_id, sum(duplicates_prevented) FROM tool_ledger
                   WHERE run_id = ANY(%s) GROUP BY run_id""",
                killed_runs,
            )
        )
    finally:
        await survivor.stop()
        if doomed is not None:
            await doomed.stop()
    per_run = [int(sent.get(r, 0)) for r in runs]
    return {
        "heartbeat_seconds": heartbeat_seconds,
        "kills": len(samples),
        "kills_wanted": kills,
        "runs": len(runs),
        "misses": misses,
        "errors": errors,
        "seconds_kill_to_retry": summarize(samples),
        "samples": samples,
        "completed_runs": sum(1 for o in outcomes if o == "completed"),
        "outcomes": sorted(set(outcomes)),
        "side_effects_per_run": {"min": min(per_run, default=0), "max": max(per_run, default=0)},
        "effects_exactly_once": bool(per_run) and all(c == 1 for c in per_run),
        "duplicates_prevented": int(sum(int(v) for v in prevented.values())),
    }
