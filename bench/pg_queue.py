"""The reference point: a plain Postgres table of steps, claimed with FOR UPDATE SKIP LOCKED.

This is the design many "durable execution on Postgres" articles start from: each step is a
row; a worker claims the oldest ready row under a lease (SKIP LOCKED lets workers pass each
other's claims), runs it, and in one statement marks it done and makes the run's next step
ready. A lease that lapses makes the row claimable again. It has no history, no retries
beyond the lease, no timers, no signals: it is the floor for "steps in Postgres".
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_queue (
    run_id text NOT NULL,
    step int NOT NULL,
    steps int NOT NULL,
    status text NOT NULL DEFAULT 'ready',
    lease_until timestamptz,
    owner text,
    attempts int NOT NULL DEFAULT 0,
    ready_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    PRIMARY KEY (run_id, step)
);
CREATE INDEX IF NOT EXISTS bench_queue_ready_idx ON bench_queue (ready_at)
    WHERE status <> 'done';
"""

CLAIM = """
UPDATE bench_queue q
SET status = 'running', owner = %(owner)s, attempts = q.attempts + 1,
    lease_until = clock_timestamp() + make_interval(secs => %(lease)s)
FROM (
    SELECT run_id, step FROM bench_queue
    WHERE status <> 'done' AND (status = 'ready' OR lease_until < clock_timestamp())
    ORDER BY ready_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) next
WHERE q.run_id = next.run_id AND q.step = next.step
RETURNING q.run_id, q.step, q.steps
"""

# Done and the next step made ready, in one statement; fenced on the claim's owner.
COMPLETE = """
WITH done AS (
    UPDATE bench_queue SET status = 'done', finished_at = clock_timestamp(), lease_until = NULL
    WHERE run_id = %(run)s AND step = %(step)s AND owner = %(owner)s AND status = 'running'
    RETURNING run_id, step, steps
)
INSERT INTO bench_queue (run_id, step, steps)
SELECT run_id, step + 1, steps FROM done WHERE step + 1 < steps
ON CONFLICT DO NOTHING
"""


@dataclass
class QueueResult:
    runs: int
    steps_per_run: int
    consumers: int
    completed_runs: int
    wall_seconds: float
    timed_out: bool
    step_gaps: list[float]  # seconds between consecutive steps of a run finishing
    durations: list[float]  # enqueue to last step done, per completed run

    @property
    def steps_per_second(self) -> float | None:
        done = self.completed_runs * self.steps_per_run
        return done / self.wall_seconds if done and self.wall_seconds else None

    @property
    def runs_per_second(self) -> float | None:
        return self.completed_runs / self.wall_seconds if self.completed_runs else None


async def setup(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        await conn.execute(SCHEMA)


async def run(
    pool: AsyncConnectionPool,
    *,
    runs: int,
    steps: int,
    consumers: int,
    budget_seconds: float,
    lease_seconds: float = 30,
) -> QueueResult:
    """Enqueue `runs` runs of `steps` no-op steps, drain them with `consumers` workers."""
    batch = uuid.uuid4().hex[:8]
    ids = [f"pgq-{batch}-{i:05d}" for i in range(runs)]
    stop = asyncio.Event()
    t0 = time.time()
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO bench_queue (run_id, step, steps) VALUES (%s, 0, %s)",
            [(run_id, steps) for run_id in ids],
        )

    async def consumer(n: int) -> None:
        owner = f"{batch}-{n}"
        idle = 0.001
        while not stop.is_set():
            async with pool.connection() as conn:
                cur = await conn.execute(CLAIM, {"owner": owner, "lease": lease_seconds})
                row = await cur.fetchone()
                if row is None:
                    await asyncio.sleep(idle)
                    idle = min(idle * 2, 0.02)
                    continue
                idle = 0.001
                run_id, step, _ = row
                # The step's work: nothing. Then done + next step ready, in one statement.
                await conn.execute(COMPLETE, {"run": run_id, "step": step, "owner": owner})

    async def watch() -> bool:
        deadline = time.monotonic() + budget_seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            async with pool.connection() as conn:
                cur = await conn.execute(
                    """SELECT count(*) FROM bench_queue
                       WHERE run_id LIKE %s AND step + 1 = steps AND status = 'done'""",
                    (f"pgq-{batch}-%",),
                )
                row = await cur.fetchone()
                if row is not None and row[0] == runs:
                    return False
        return True

    workers = [asyncio.create_task(consumer(n)) for n in range(consumers)]
    try:
        timed_out = await watch()
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT run_id, extract(epoch FROM finished_at)::float8 FROM bench_queue
               WHERE run_id LIKE %s AND status = 'done' ORDER BY run_id, step""",
            (f"pgq-{batch}-%",),
        )
        rows = await cur.fetchall()
        await conn.execute("DELETE FROM bench_queue WHERE run_id LIKE %s", (f"pgq-{batch}-%",))
    finished: dict[str, list[float]] = {}
    for run_id, at in rows:
        finished.setdefault(run_id, []).append(at)
    complete = [times for times in finished.values() if len(times) == steps]
    end = max((times[-1] for times in complete), default=time.time())
    gaps = [b - a for times in complete for a, b in itertools.pairwise(times)]
    return QueueResult(
        runs=runs,
        steps_per_run=steps,
        consumers=consumers,
        completed_runs=len(complete),
        wall_seconds=end - t0,
        timed_out=timed_out,
        step_gaps=gaps,
        durations=[times[-1] - t0 for times in complete],
    )
