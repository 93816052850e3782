"""Everything at once: `python chaos/run.py --mixed --runs 1000`.

One load of runs on one task queue, fed so that a fixed number are open at a time, while
workers are SIGKILLed at random moments and restarted, every fault point is armed in turn in
the restarted workers, and Temporal server restarts and Postgres outages strike in the middle
of the load. Then every run is audited like in every other scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from bench.harness import WorkerProcess
from chaos.lab import POINT_PLANS, ZOMBIE_SECONDS, Lab
from chaos.outcome import Outcome, finish, late_writes

QUEUE = "mixed"
PROGRESS_EVERY = 10.0


@dataclass(frozen=True)
class Pace:
    """How hard the load is pushed and hit."""

    runs: int
    in_flight: int = 100
    workers: int = 3
    faulted_share: float = 0.4  # of restarted workers, those with a fault point armed
    kill_every: tuple[float, float] = (4.0, 10.0)  # seconds between SIGKILLs, drawn uniformly
    # A worker is killed only once it has polled this long: on 2 cores a fresh worker's first
    # workflow tasks load the workflow code, and killing it sooner only ever stalls the load.
    killable_after: float = 8.0
    temporal_down: float = 10.0
    postgres_down: float = 30.0

    @property
    def every_point_must_fire(self) -> bool:
        """From 200 runs up, each fault point gets its chances; below, the figures tell."""
        return self.runs >= 200

    @property
    def chaos_seconds(self) -> float:
        """The chaos stops after this at the latest; calm workers then finish what is open."""
        return 120 + 3 * self.runs

    @property
    def outages(self) -> list[tuple[float, str]]:
        """When (the share of runs ended) each outage strikes: Temporal and Postgres taking
        turns, one of each per 500 runs, at least one of each."""
        rounds = max(1, self.runs // 500)
        kinds = ["temporal", "postgres"] * rounds
        return [((i + 1) / (len(kinds) + 1), kind) for i, kind in enumerate(kinds)]


@dataclass
class Crew:
    """Workers on one queue, each restarted as soon as it dies: killed by us, by its armed
    fault point, or given up while a service was down."""

    lab: Lab
    pace: Pace
    rng: random.Random
    live: dict[int, tuple[WorkerProcess, float]] = field(default_factory=dict)
    every: list[WorkerProcess] = field(default_factory=list)
    armed: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)
    killed: set[WorkerProcess] = field(default_factory=set)  # not pids: those are reused
    sigkills: int = 0
    restarts: int = 0
    gave_up: int = 0

    def _plan(self) -> str:
        """No fault, or the fault point armed least so far (ties drawn): each gets its turns."""
        if self.rng.random() >= self.pace.faulted_share:
            return ""
        least = min(self.armed[plan] for plan in POINT_PLANS)
        plan = self.rng.choice([p for p in POINT_PLANS if self.armed[p] == least])
        self.armed[plan] += 1
        return plan

    async def _keep(self, slot: int) -> None:
        while True:
            plan = self._plan()
            worker = self.lab.worker(
                QUEUE, faults=plan, AGENTRUN_ZOMBIE_SECONDS=str(ZOMBIE_SECONDS)
            )
            self.every.append(worker)
            try:
                await worker.start(ready_line="polling", within=90)
            except (RuntimeError, TimeoutError):  # a service is down: try again shortly
                await worker.stop(within=2)
                self.gave_up += 1
                await asyncio.sleep(1)
                continue
            self.live[slot] = (worker, time.monotonic())
            assert worker.proc is not None
            code = await worker.proc.wait()
            del self.live[slot]
            self.restarts += 1
            if worker in self.killed:
                continue
            if code == -9 and plan:
                self.fired[plan] += 1
            else:
                self.gave_up += 1

    def kill_one(self) -> None:
        """SIGKILL a worker picked at random among those up long enough (none if none is)."""
        ripe = time.monotonic() - self.pace.killable_after
        alive = [
            worker
            for worker, since in self.live.values()
            if since <= ripe and worker.proc and worker.proc.returncode is None
        ]
        if alive:
            victim = self.rng.choice(alive)
            self.killed.add(victim)
            assert victim.proc is not None
            victim.proc.kill()
            self.sigkills += 1

    @contextlib.asynccontextmanager
    async def working(self) -> AsyncIterator[Crew]:
        keepers = [asyncio.create_task(self._keep(slot)) for slot in range(self.pace.workers)]
        try:
            yield self
        finally:
            for keeper in keepers:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            for worker in self.every:  # a worker starting when its keeper stopped, too
                await worker.stop(within=5)
            self.live.clear()


@dataclass
class Feed:
    """Starts the runs so that about `in_flight` are open at once; counts those ended."""

    lab: Lab
    pace: Pace
    run_ids: list[str] = field(default_factory=list)
    ended: int = 0

    async def count_ended(self) -> None:
        count = await self.lab.client.count_workflows(
            f"TaskQueue = '{QUEUE}' AND ExecutionStatus != 'Running'"
        )
        self.ended = count.count

    async def top_up(self) -> None:
        room = min(self.pace.runs - len(self.run_ids), self.pace.in_flight - self.open)
        for _ in range(max(room, 0)):
            started = await self.lab.start_runs(QUEUE, QUEUE, 1, first=len(self.run_ids))
            self.run_ids.extend(started)

    @property
    def open(self) -> int:
        return len(self.run_ids) - self.ended


async def mixed(lab: Lab, pace: Pace, rng: random.Random) -> Outcome:
    """The load, the SIGKILLs, the fault points and the outages together; audited after."""
    started = time.monotonic()
    outcome = Outcome("mixed", pace.runs)
    feed = Feed(lab, pace)
    crew = Crew(lab, pace, rng)
    outages = list(pace.outages)
    struck: Counter[str] = Counter()
    next_kill = time.monotonic() + rng.uniform(*pace.kill_every)
    next_word = time.monotonic() + PROGRESS_EVERY

    def progress() -> str:
        return (
            f"chaos: mixed: {time.monotonic() - started:.0f} s: {len(feed.run_ids)}/{pace.runs} "
            f"started, {feed.ended} ended; {crew.sigkills} SIGKILLs, "
            f"{sum(crew.fired.values())} faults fired, {struck['temporal']} Temporal restarts, "
            f"{struck['postgres']} Postgres outages"
        )

    async def strike(kind: str) -> None:
        print(f"chaos: mixed: {kind} goes down", flush=True)
        if kind == "temporal":
            await asyncio.to_thread(lab.stack.stop_temporal)
            await asyncio.sleep(pace.temporal_down)
            await asyncio.to_thread(lab.stack.start_temporal)
        else:
            await asyncio.to_thread(lab.stack.stop_postgres)
            await asyncio.sleep(pace.postgres_down)
            await asyncio.to_thread(lab.stack.start_postgres)
        struck[kind] += 1
        print(f"chaos: mixed: {kind} is back", flush=True)

    outage: asyncio.Task[None] | None = None
    async with lab.approver_for(feed.run_ids), crew.working():
        while feed.ended < pace.runs or outages or outage is not None:
            with contextlib.suppress(Exception):  # the server may be down on purpose
                await asyncio.wait_for(feed.count_ended(), 5)
                await asyncio.wait_for(feed.top_up(), 30)
            now = time.monotonic()
            if now - started > pace.chaos_seconds and outage is None:
                outcome.problems.append(
                    f"{pace.runs - feed.ended} runs still open after {pace.chaos_seconds:.0f} s"
                    " of chaos (the calm workers finish them, the audit checks them)"
                )
                break
            if outage is not None and outage.done():
                await outage
                outage = None
            if outage is None and outages and feed.ended >= outages[0][0] * pace.runs:
                outage = asyncio.create_task(strike(outages.pop(0)[1]))
            if now >= next_kill:
                crew.kill_one()
                next_kill = now + rng.uniform(*pace.kill_every)
            if now >= next_word:
                print(progress(), flush=True)
                next_word = now + PROGRESS_EVERY
            await asyncio.sleep(0.5)
        print(progress(), flush=True)
    # Healthy workers finish what the chaos left open (nothing, once every run ended).
    calm = [
        await lab.worker(QUEUE).start(ready_line="polling")
        for _ in range(2 if feed.ended < pace.runs else 0)
    ]
    print(f"chaos: mixed: waiting for the last runs, then auditing all {pace.runs}", flush=True)
    async with lab.approver_for(feed.run_ids):
        await finish(lab, outcome, feed.run_ids, started)
    audit_seconds = round(time.monotonic() - started - outcome.seconds, 1)
    for worker in calm:
        await worker.stop()

    outcome.disruptions = crew.sigkills + sum(crew.fired.values()) + sum(struck.values())
    late = await late_writes(lab, feed.run_ids)
    outcome.figures.update(
        {
            "SIGKILLs": crew.sigkills,
            "fault points armed": dict(sorted(crew.armed.items())),
            "faults fired": dict(sorted(crew.fired.items())),
            "zombie late writes fenced off": late,
            "Temporal restarts": struck["temporal"],
            "Postgres outages": struck["postgres"],
            "workers started": crew.restarts + len(calm) + pace.workers,
            "workers that gave up (a service was down)": crew.gave_up,
            "runs/s": round(pace.runs / outcome.seconds, 2) if outcome.seconds else 0,
            "audit (s)": audit_seconds,
            "pace": {
                "in flight": pace.in_flight,
                "workers": pace.workers,
                "faulted share": pace.faulted_share,
                "kill every (s)": list(pace.kill_every),
                "Temporal down (s)": pace.temporal_down,
                "Postgres down (s)": pace.postgres_down,
            },
        }
    )
    if pace.every_point_must_fire:
        never = [p for p in POINT_PLANS if p != "tool.zombie" and not crew.fired[p]]
        if never:
            outcome.problems.append(f"fault points that never fired: {', '.join(never)}")
        if not late:
            outcome.problems.append("tool.zombie: no zombie attempt wrote late")
    return outcome
