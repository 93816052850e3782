"""Scale-out: ours' throughput with 1, 2 and 4 worker processes polling
one task queue, against one Temporal server and one Postgres, at each concurrency level.

Per row: steps/s (runs started at once, first start request to last close; a level cut
short by its budget counts the tool steps done by then, from the histories), the CPU each
part used per step (all worker processes together, the server, Postgres), the cores the
stack kept busy and the cores the machine had free meanwhile (psutil's machine-wide idle
time), and steps/s against one process at the same level.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.client import Client

from bench import harness
from bench.stats import fmt, fmt_ratio, ratio

OUR_STEP = "tool.invoke"


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far, every core summed."""
    times = harness.psutil.cpu_times() if harness.psutil is not None else None
    if times is None:
        return 0.0, 0.0
    idle = times.idle + getattr(times, "iowait", 0.0)
    return sum(times) - idle, idle


async def one_row(
    client: Client,
    worker_env: dict[str, str],
    others: dict[str, Callable[[], list[int]]],
    start: Callable[[str, str], Awaitable[None]],
    *,
    processes: int,
    level: int,
    steps: int,
    budget_seconds: float,
) -> dict[str, Any]:
    """`level` runs at once on `processes` worker processes of ours, sharing one queue."""
    queue = harness.new_queue(f"scale-{processes}p-l{level}")
    workers = [harness.bench_worker("ours", queue, worker_env) for _ in range(processes)]
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(harness.running(worker))
        pids = [w.pid for w in workers]
        busy0, idle0 = machine_cpu()
        async with harness.Sampler(pids[0], {**others, "workers": lambda: pids}) as sampler:
            result = await harness.run_level(
                client,
                level=level,
                steps=steps,
                task_queue=queue,
                start=lambda workflow_id: start(workflow_id, queue),
                budget_seconds=budget_seconds,
                prefix=queue,
            )
        busy1, idle1 = machine_cpu()
    steps_done = result.completed * steps
    if result.timed_out and result.cut_off is not None:
        steps_done = await harness.steps_completed(
            client, result.workflow_ids, OUR_STEP, result.cut_off
        )
    done = max(steps_done, 1)
    wall = sampler.wall or 1.0
    cpu = sampler.cpu
    return {
        "processes": processes,
        "level": level,
        "started": result.started,
        "completed": result.completed,
        "timed_out": result.timed_out,
        "steps_done": steps_done,
        "wall_seconds": result.wall_seconds,
        "steps_per_second": steps_done / result.wall_seconds if result.wall_seconds else None,
        "workers_cpu_ms_per_step": cpu.get("workers", 0) * 1000 / done,
        "temporal_cpu_ms_per_step": cpu.get("temporal", 0) * 1000 / done,
        "postgres_cpu_ms_per_step": cpu.get("postgres", 0) * 1000 / done,
        "cores_busy": {
            part: cpu.get(part, 0) / wall for part in ("workers", "temporal", "postgres")
        },
        "machine_cores_busy": (busy1 - busy0) / wall,
        "machine_cores_idle": (idle1 - idle0) / wall,
        "rss_mb_one_worker": sampler.peak_rss / 1e6 if sampler.peak_rss else None,
    }


async def stage(
    out: dict[str, Any],
    client: Client,
    worker_env: dict[str, str],
    others: dict[str, Callable[[], list[int]]],
    start: Callable[[str, str], Awaitable[None]],
    *,
    processes: Sequence[int],
    levels: Sequence[int],
    steps: int,
    budget_seconds: float,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fills `out` row by row (a caller that times the stage out keeps the rows done)."""
    out.update({"steps_per_run": steps, "processes": list(processes), "rows": []})
    for level in levels:
        one: float | None = None
        for n in processes:
            try:
                row = await one_row(
                    client,
                    worker_env,
                    others,
                    start,
                    processes=n,
                    level=level,
                    steps=steps,
                    budget_seconds=budget_seconds,
                )
            except Exception as err:  # one row's failure is reported, the rest still run
                row = {"processes": n, "level": level, "error": f"{type(err).__name__}: {err}"}
                log(f"  {level} runs, {n} worker process(es): {row['error']}")
                out["rows"].append(row)
                continue
            if n == 1:
                one = row["steps_per_second"]
            row["ratio_to_one_process"] = ratio(row["steps_per_second"], one)
            out["rows"].append(row)
            log(
                f"  {level} runs, {n} worker process(es): {fmt(row['steps_per_second'])} "
                f"steps/s ({fmt_ratio(row['ratio_to_one_process'])} of one), machine idle "
                f"{fmt(row['machine_cores_idle'], ' cores', 2)}"
            )
    return out
