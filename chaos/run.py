"""Try hard to break the promise, then audit: `python chaos/run.py [--quick] [--mixed]`.

Scenarios (each on its own task queue, in one embedded stack on loopback):
  points    each named fault point (agentledger.core.faults) fired in a worker mid-run
  kill      workers SIGKILLed at random moments and restarted, some with faults armed
  temporal  the Temporal dev server stopped and restarted on its database file mid-load
  postgres  Postgres stopped mid-load (30 s; 10 s with --quick), then back
  mixed     (only with --mixed) all of the above at once on one load of 1,000 runs of every
            kind (sessions, sub-agents, say, forks, signed approvals, a capped tenant) with a
            deploy halfway (chaos/mixed.py, chaos/kinds.py); --publish DIR keeps one file per seed

After each: every run ended completed; its mirror matches its Temporal history row by row
(0 duplicate, divergent, lost and orphan rows); every side effect happened exactly once; no
model answer that had arrived was paid for twice; each run has its receipt. Exits 1 if
anything is off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python chaos/run.py` puts chaos/, not the repo, on the path
    sys.path.insert(0, str(ROOT))

from agentledger.client import projection  # noqa: E402
from bench.harness import WorkerProcess  # noqa: E402
from chaos.kinds import SessionPace  # noqa: E402
from chaos.lab import POINT_PLANS, ZOMBIE_SECONDS, Lab  # noqa: E402
from chaos.mixed import Pace, mixed  # noqa: E402
from chaos.outcome import Outcome, finish, late_writes  # noqa: E402

KILL_PLANS = [plan for plan in POINT_PLANS if plan != "tool.zombie"]


async def healthy(lab: Lab, queue: str) -> WorkerProcess:
    return await lab.worker(queue).start(ready_line="polling")


# ------------------------------------------------------------------ scenarios


async def points(lab: Lab, runs: int) -> Outcome:
    """Each fault point in a worker of its own; a healthy worker then finishes the runs."""
    started = time.monotonic()
    outcome = Outcome("points", runs * len(POINT_PLANS))
    every: list[str] = []

    async def one(plan: str) -> None:
        queue = "points-" + plan.replace(":", "-").replace(".", "-").replace("_", "-")
        run_ids = await lab.start_runs(queue, queue, runs)
        every.extend(run_ids)
        doomed = await lab.worker(
            queue, faults=plan, AGENTLEDGER_ZOMBIE_SECONDS=str(ZOMBIE_SECONDS)
        ).start(ready_line="polling")
        if plan == "tool.zombie":
            await lab.wait_ended(run_ids, 240)
            await asyncio.sleep(ZOMBIE_SECONDS + 4)  # the zombies wake and write, late
            late = await late_writes(lab, run_ids)
            outcome.figures["zombie late writes fenced off"] = late
            if not late:
                outcome.problems.append("tool.zombie: no zombie attempt wrote late")
            else:
                outcome.disruptions += 1
            await doomed.stop()
            return
        if await doomed.wait_exit(within=120) is None:
            outcome.problems.append(f"{plan}: the fault point was never reached")
            await doomed.stop()
        else:
            outcome.disruptions += 1
        finisher = await healthy(lab, queue)
        await lab.wait_ended(run_ids, 240)
        await finisher.stop()

    async with lab.approver_for(every):
        await asyncio.gather(*(one(plan) for plan in POINT_PLANS))
    return await finish(lab, outcome, every, started)


async def kill(lab: Lab, runs: int, chaos_seconds: float, rng: random.Random) -> Outcome:
    """Two workers, SIGKILLed at random moments and restarted, half of them with a fault."""
    started = time.monotonic()
    outcome = Outcome("kill", runs)
    queue = "kill"
    fired = 0

    async def fresh() -> WorkerProcess:
        plan = rng.choice(KILL_PLANS) if rng.random() < 0.5 else ""
        return await lab.worker(queue, faults=plan).start(ready_line="polling")

    # Both workers poll before the runs start, and the first kill comes within a second of
    # them: a run's read-only tools run in its workflow task, so a run may be done in a few
    # seconds, before a kill that waited for a slow second worker would strike.
    slots = [await fresh(), await fresh()]
    run_ids = await lab.start_runs(queue, queue, runs)
    async with lab.approver_for(run_ids):
        deadline = time.monotonic() + chaos_seconds
        next_kill = time.monotonic() + rng.uniform(0.3, 1)
        while time.monotonic() < deadline and await lab.open_runs(run_ids):
            await asyncio.sleep(0.3)
            if time.monotonic() >= next_kill:
                victim = rng.choice(slots)
                if victim.proc is not None and victim.proc.returncode is None:
                    victim.proc.kill()
                    outcome.disruptions += 1
                next_kill = time.monotonic() + rng.uniform(1, 3)
            for index, worker in enumerate(slots):
                if worker.proc is not None and worker.proc.returncode is not None:
                    if worker.proc.returncode == -9 and worker.env.get("AGENTLEDGER_FAULTS"):
                        fired += 1
                    slots[index] = await fresh()
        for worker in slots:
            await worker.stop()
        calm = [await healthy(lab, queue), await healthy(lab, queue)]
        await finish(lab, outcome, run_ids, started)
        for worker in calm:
            await worker.stop()
    outcome.figures["SIGKILLs"] = outcome.disruptions
    outcome.figures["faulted workers that died"] = fired
    return outcome


@contextlib.asynccontextmanager
async def under_load(lab: Lab, outcome: Outcome, queue: str, runs: int) -> AsyncIterator[list[str]]:
    """Two healthy workers and `runs` runs on `queue`, approved as they ask; audited after."""
    started = time.monotonic()
    workers = [await healthy(lab, queue), await healthy(lab, queue)]
    run_ids = await lab.start_runs(queue, queue, runs)
    async with lab.approver_for(run_ids):
        yield run_ids
        for index, worker in enumerate(workers):  # a worker that gave up is restarted
            if worker.proc is not None and worker.proc.returncode is not None:
                workers[index] = await healthy(lab, queue)
        await finish(lab, outcome, run_ids, started)
    for worker in workers:
        await worker.stop()


async def temporal(lab: Lab, runs: int, down_seconds: float) -> Outcome:
    """The dev server stops mid-load and comes back on the same database file."""
    outcome = Outcome("temporal", runs)
    async with under_load(lab, outcome, "temporal", runs):
        await asyncio.sleep(3)
        await asyncio.to_thread(lab.stack.stop_temporal)
        await asyncio.sleep(down_seconds)
        await asyncio.to_thread(lab.stack.start_temporal)
        outcome.disruptions = 1
    outcome.figures["server down (s)"] = down_seconds
    return outcome


async def postgres(lab: Lab, runs: int, down_seconds: float) -> Outcome:
    """Postgres stops mid-load; runs wait in Temporal; the mirror catches up once it is back."""
    outcome = Outcome("postgres", runs)
    async with under_load(lab, outcome, "postgres", runs) as run_ids:
        await asyncio.sleep(2)
        await asyncio.to_thread(lab.stack.stop_postgres)
        down = time.monotonic()
        # Starting runs needs only Temporal: these wait, durable, for the database.
        late = await lab.start_runs("postgres", "postgres-during", runs // 2)
        run_ids.extend(late)
        outcome.runs += len(late)
        await asyncio.sleep(max(0.0, down_seconds - (time.monotonic() - down)))
        await asyncio.to_thread(lab.stack.start_postgres)
        back = time.monotonic()
        outcome.disruptions = 1
        moving = await mirror_moving(lab, run_ids, back, within=60)
        caught_up = await catch_up(lab, run_ids, back, within=60)
    outcome.figures["Postgres down (s)"] = down_seconds
    outcome.figures["mirror written again after (s)"] = moving
    outcome.figures["mirror holds all history accepted after (s)"] = caught_up
    for name, seconds in (("written again", moving), ("caught up", caught_up)):
        if seconds is None or seconds > 10:
            outcome.problems.append(f"the mirror {name} after {seconds} s, not within 10 s")
    return outcome


async def mirror_moving(lab: Lab, run_ids: list[str], since: float, within: float) -> float | None:
    """Seconds from `since` until the runs' mirror takes a new event: the runs go on."""
    before: int | None = None
    while time.monotonic() - since < within:
        with contextlib.suppress(Exception):
            async with lab.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM events WHERE run_id = ANY(%s)", (run_ids,)
                )
                row = await cur.fetchone()
            count = int(row[0]) if row else 0
            if before is None:
                before = count
            elif count > before:
                return round(time.monotonic() - since, 1)
        await asyncio.sleep(0.1)
    return None


async def catch_up(lab: Lab, run_ids: list[str], since: float, within: float) -> float | None:
    """Seconds from `since` until the mirror holds everything Temporal had accepted then.

    The histories are taken at `since`; while they are replayed (slow on 2 cores), the
    mirror is sampled every 0.2 s, and the answer is the first sample that holds, for every
    run history had accepted a write for, the projected run version, its last event
    and its final steps.
    """
    samples: list[tuple[float, dict[str, tuple[int, int, int]]]] = []
    histories = {run_id: await projection.run_histories(lab.client, run_id) for run_id in run_ids}

    async def sample() -> None:
        while time.monotonic() - since < within:
            with contextlib.suppress(Exception):
                async with lab.pool.connection() as conn:
                    cur = await conn.execute(
                        """SELECT run_id, version,
                              (SELECT coalesce(max(seq), 0) FROM events e
                               WHERE e.run_id = r.run_id),
                              (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id AND final)
                           FROM runs r WHERE run_id = ANY(%s)""",
                        (run_ids,),
                    )
                    rows = await cur.fetchall()
                samples.append((time.monotonic() - since, {r[0]: r[1:] for r in rows}))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    need = {}
    for run_id, chain in histories.items():
        derived = await projection.project(lab.client, run_id, histories=chain)
        if derived.run is None:  # started in the outage: history had accepted no write yet
            continue
        need[run_id] = (
            derived.run.version,
            max(derived.events, default=0),
            sum(step.final for step in derived.steps.values()),
        )

    def holds(mirror: dict[str, tuple[int, int, int]]) -> bool:
        return all(
            run_id in mirror and all(m >= n for m, n in zip(mirror[run_id], want, strict=True))
            for run_id, want in need.items()
        )

    checked = 0
    while True:
        for at, mirror in samples[checked:]:
            if holds(mirror):
                sampler.cancel()
                return round(at, 1)
        checked = len(samples)
        if sampler.done():
            return None
        await asyncio.sleep(0.2)


# ------------------------------------------------------------------ the command


def table(outcomes: list[Outcome]) -> str:
    head = (
        f"{'scenario':9} {'runs':>5} {'done':>5} {'hits':>5} {'dup':>4} {'div':>4} "
        f"{'lost':>4} {'orph':>4} {'2x fx':>5} {'0x fx':>5} {'2x $':>4} {'no rcpt':>7} "
        f"{'secs':>6}"
    )
    lines = [head, "-" * len(head)]
    for o in outcomes:
        lines.append(
            f"{o.scenario:9} {o.runs:>5} {o.completed:>5} {o.disruptions:>5} {o.duplicate:>4} "
            f"{o.divergent:>4} {o.lost:>4} {o.orphan:>4} {o.duplicate_effects:>5} "
            f"{o.missing_effects:>5} {o.paid_twice:>4} {o.missing_receipts:>7} {o.seconds:>6}"
        )
    lines.append(
        "hits: faults fired or SIGKILLs; dup/div/lost/orph: mirror rows against history; "
        "2x/0x fx: side effects done twice / never; 2x $: model answers paid twice; "
        "no rcpt: runs without a receipt"
    )
    for o in outcomes:
        for name, value in o.figures.items():
            lines.append(f"{o.scenario}: {name}: {value}")
        for problem in o.problems[:20]:
            lines.append(f"{o.scenario}: PROBLEM {problem}")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Outcome]:
    quick = args.quick
    rng = random.Random(args.seed)
    plan = {
        "points": lambda lab: points(lab, 1 if quick else 3),
        "kill": lambda lab: kill(
            lab, args.runs or (12 if quick else 200), 20 if quick else 150, rng
        ),
        "temporal": lambda lab: temporal(lab, 6 if quick else 40, 3 if quick else 10),
        "postgres": lambda lab: postgres(lab, 6 if quick else 40, 10 if quick else 30),
        "mixed": lambda lab: mixed(lab, mixed_pace(args), rng),
    }
    chosen = args.only.split(",") if args.only else [name for name in plan if name != "mixed"]
    if args.mixed:
        chosen = ["mixed"]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="agentledger-chaos-") as home:
        lab = await Lab(Path(home) / "lab").start()
        try:
            for name in chosen:
                print(f"chaos: {name} ...", flush=True)
                outcome = await plan[name](lab)
                if name == "mixed":  # what a published file came from
                    outcome.figures = {"seed": args.seed, **outcome.figures}
                outcomes.append(outcome)
                state = "clean" if outcome.clean else f"{len(outcome.problems)} problems"
                print(
                    f"chaos: {name}: {outcome.completed}/{outcome.runs} completed, {state}, "
                    f"{outcome.seconds} s",
                    flush=True,
                )
        finally:
            await lab.stop()
    return outcomes


def mixed_pace(args: argparse.Namespace) -> Pace:
    if args.quick:
        return Pace(
            runs=args.runs or 12,
            in_flight=args.in_flight or 12,
            kill_every=(3.0, 6.0),
            killable_after=5,
            temporal_down=3,
            postgres_down=6,
            sessions=SessionPace(turns=3, compact_after=2),
            last_runs_within=90,
        )
    return Pace(runs=args.runs or 1000, in_flight=args.in_flight or Pace.in_flight)


def main() -> None:
    # The lab's own pool complains while Postgres is down on purpose; the audit speaks.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short version CI runs")
    parser.add_argument(
        "--only", help="comma-separated scenarios: points,kill,temporal,postgres,mixed"
    )
    parser.add_argument(
        "--mixed",
        action="store_true",
        help="every kind of chaos at once on one load (1,000 runs; 12 with --quick)",
    )
    parser.add_argument(
        "--runs", type=int, help="runs in the kill scenario (200; 12 quick) or with --mixed"
    )
    parser.add_argument(
        "--in-flight", type=int, help=f"with --mixed: runs open at once ({Pace.in_flight})"
    )
    parser.add_argument(
        "--seed", type=int, default=7, help="seed for when and whom to kill, and the mix of runs"
    )
    parser.add_argument("--json", help="also write the outcomes to this JSON file")
    parser.add_argument("--text", help="also write the printed table to this file")
    parser.add_argument(
        "--publish",
        metavar="DIR",
        help="with --mixed: also write DIR/mixed-every-feature-seed-SEED.{txt,json}, one pair "
        "per seed (docs/chaos/ holds the published ones)",
    )
    args = parser.parse_args()
    if args.publish and not args.mixed:
        parser.error("--publish publishes a --mixed load; add --mixed")
    known = {"points", "kill", "temporal", "postgres", "mixed"}
    unknown = set(args.only.split(",")) - known if args.only else set()
    if unknown:
        parser.error(
            f"no scenario {', '.join(sorted(unknown))}; pick from {', '.join(sorted(known))}"
        )
    for name in ("runs", "in_flight"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be 1 or more")
    outcomes = asyncio.run(main_async(args))
    printed = table(outcomes)
    print(printed)
    as_json = json.dumps([asdict(o) for o in outcomes], indent=2) + "\n"
    targets = [(args.json, as_json), (args.text, printed + "\n")]
    if args.publish:
        stem = Path(args.publish) / f"mixed-every-feature-seed-{args.seed}"
        targets += [(f"{stem}.json", as_json), (f"{stem}.txt", printed + "\n")]
    for path, text in targets:
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
    sys.exit(0 if all(o.clean for o in outcomes) else 1)


if __name__ == "__main__":
    main()
