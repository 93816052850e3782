"""The Postgres part of one step attempt, written apart and folded, side by side.

    python bench/attempt_writes.py            # 500 attempts of each kind, one at a time
    python bench/attempt_writes.py --n 2000 --concurrent 10

A tool attempt written apart is its claim (carrying the run's mirror batch) and then its
report; folded, the quick attempt's claim, batch and report in one statement. A model
attempt apart is its claim, the journal read, the answer's journal row and the report;
folded, the claim that reads the journal and the report that journals the answer. Both run
on the same stores against a private Postgres (pgserver); times are per attempt, printed,
never asserted: the wall time's p50, and the CPU time this process (the worker's side of a
write: building parameters, psycopg) spent per attempt. Run from two checkouts in turn, it
measures a change to the stores the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/attempt_writes.py` puts bench/, not the repo, first
    sys.path.insert(0, str(ROOT))

from agentledger.core.results import Usage  # noqa: E402
from agentledger.store.db import open_pool  # noqa: E402
from agentledger.store.mirror_store import AttemptEnd, MirrorStore  # noqa: E402
from agentledger.store.model_journal import Answer, ModelJournal  # noqa: E402

# The rows the store tests write: a run's batch with one finished step, a no-op step's claim.
from tests.support import mirror_batch, step_claim  # noqa: E402

TOOL_STEP = "0002-tool_call"
MODEL_STEP = "0002-model_call"
RESPONSE = {"id": "r", "choices": [{"message": {"role": "assistant", "content": "done " * 40}}]}
USAGE = Usage(input_tokens=120, output_tokens=40)

Attempt = Callable[[MirrorStore, ModelJournal, str], Awaitable[None]]


async def tool_apart(store: MirrorStore, journal: ModelJournal, run_id: str) -> None:
    batch = mirror_batch(run_id, fence=3, step_seq=1)
    await store.begin_attempt(**step_claim(run_id, TOOL_STEP, 1), batch=batch)
    await store.end_attempt(
        run_id=run_id, step_id=TOOL_STEP, attempt=1, status="succeeded", output={"ok": True}
    )


async def tool_folded(store: MirrorStore, journal: ModelJournal, run_id: str) -> None:
    await store.begin_attempt(
        **step_claim(run_id, TOOL_STEP, 1),
        batch=mirror_batch(run_id, fence=3, step_seq=1),
        end=AttemptEnd("succeeded", output={"ok": True}),
        started_at=datetime.now(UTC),
    )


def model_claim(run_id: str) -> dict[str, Any]:
    claim = step_claim(run_id, MODEL_STEP, 1)
    del claim["type"], claim["name"]
    return claim


def model_report(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step_id": MODEL_STEP,
        "attempt": 1,
        "status": "succeeded",
        "output": {"content": "done", "tool_calls": []},
        "tokens_in": USAGE.input_tokens,
        "tokens_out": USAGE.output_tokens,
        "cost_usd": 0.01,
    }


async def model_apart(store: MirrorStore, journal: ModelJournal, run_id: str) -> None:
    batch = mirror_batch(run_id, fence=3, step_seq=1)
    await store.begin_attempt(
        **model_claim(run_id),
        type="model_call",
        name="m",
        batch=batch,
    )
    await journal.find(run_id, MODEL_STEP, "m")
    await journal.record(
        run_id=run_id,
        step_id=MODEL_STEP,
        attempt=1,
        model="m",
        response=RESPONSE,
        usage=USAGE,
        cost_usd=0.01,
    )
    await store.end_attempt(**model_report(run_id))


async def model_folded(store: MirrorStore, journal: ModelJournal, run_id: str) -> None:
    batch = mirror_batch(run_id, fence=3, step_seq=1)
    await store.begin_model_attempt(model="m", batch=batch, **model_claim(run_id))
    await store.end_attempt(
        **model_report(run_id),
        answer=Answer("m", RESPONSE, USAGE, 0.01),
    )


async def timed(
    attempt: Attempt, store: MirrorStore, journal: ModelJournal, n: int, concurrent: int
) -> tuple[float, float, float]:
    """(p50 ms per attempt, attempts per second, this process's CPU ms per attempt) over `n`
    attempts, `concurrent` at a time: the worker's side, without the server's."""
    times: list[float] = []
    gate = asyncio.Semaphore(concurrent)

    async def one() -> None:
        async with gate:
            started = time.perf_counter()
            await attempt(store, journal, f"bench-{uuid.uuid4().hex[:12]}")
            times.append(time.perf_counter() - started)

    began, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return statistics.median(times) * 1000, n / wall, cpu / n * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="attempts of each kind")
    parser.add_argument("--concurrent", type=int, default=1, help="attempts in flight at once")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    args = parser.parse_args()
    import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="attempt-writes-"), cleanup_mode="delete")
    try:
        pool = await open_pool(server.get_uri(), max_size=max(10, args.concurrent + 4))
        store, journal = MirrorStore(pool), ModelJournal(pool)
        kinds: dict[str, Attempt] = {
            "tool, apart": tool_apart,
            "tool, folded": tool_folded,
            "model, apart": model_apart,
            "model, folded": model_folded,
        }
        results: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
        for attempt in kinds.values():  # warm: prepared statements, pool connections
            await timed(attempt, store, journal, 50, args.concurrent)
        for _ in range(args.rounds):
            for kind, attempt in kinds.items():
                results[kind].append(await timed(attempt, store, journal, args.n, args.concurrent))
        await pool.close()
    finally:
        server.cleanup()
    print(f"{args.n} attempts of each kind, {args.concurrent} at a time, {args.rounds} rounds")
    print(f"| {'attempt':<14} | p50 ms per attempt | attempts/s | client CPU ms per attempt |")
    print(f"| {'-' * 14} | ------------------ | ---------- | ------------------------- |")
    for kind, rounds in results.items():
        p50 = " / ".join(f"{r[0]:.2f}" for r in rounds)
        rate = " / ".join(f"{r[1]:.0f}" for r in rounds)
        cpu = " / ".join(f"{r[2]:.3f}" for r in rounds)
        print(f"| {kind:<14} | {p50:<18} | {rate:<10} | {cpu:<25} |")


if __name__ == "__main__":
    asyncio.run(main())
