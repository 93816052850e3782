"""Everything at once: `python chaos/run.py --mixed --runs 1000`.

One load of runs of every kind (chaos/kinds.py) on one task queue, fed so that a fixed number
are open at a time, while workers are SIGKILLed at random moments and restarted, every fault
point is armed in turn in the restarted workers, Temporal server restarts and Postgres outages
strike in the middle of the load, and a new build is deployed halfway. Then every run, the
sub-agents' runs too, is audited like in every other scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from agentledger import RunClient
from agentledger.core.constants import MOVING_TO_CURRENT_BUILD
from agentledger.core.errors import OperationRefused
from agentledger.temporal import deployments
from bench.harness import WorkerProcess
from chaos.audit import children_of, orphans
from chaos.kinds import CHILD, EFFECTS, Mix, SessionPace, by_kind, compacted, draw
from chaos.lab import POINT_PLANS, ZOMBIE_SECONDS, Lab
from chaos.outcome import Outcome, finish, late_writes

QUEUE = "mixed"
# The build the workers start with, and the one deployed in the middle of the load.
FIRST_BUILD, NEXT_BUILD = "v1", "v2"
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
    last_runs_within: float = 300.0  # seconds the calm workers have to end the last runs
    deploy_at: float = 0.5  # the share of runs started when the next build is deployed
    sessions: SessionPace = field(default_factory=SessionPace)

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
    deployment: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:6]}")
    builds: list[str] = field(default_factory=list)  # deployed, oldest first
    deploy_seconds: list[float] = field(default_factory=list)
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
                QUEUE,
                faults=plan,
                AGENTLEDGER_ZOMBIE_SECONDS=str(ZOMBIE_SECONDS),
                **self.build(slot),
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

    def build(self, slot: int) -> dict[str, str]:
        """A worker's build: slot 0 keeps the oldest, which open runs may be pinned to; the
        others run the newest."""
        builds = self.builds or [FIRST_BUILD]
        return {
            "AGENTLEDGER_BUILD_ID": builds[0] if slot == 0 else builds[-1],
            "AGENTLEDGER_DEPLOYMENT_NAME": self.deployment,
        }

    async def deploy(self, build: str) -> None:
        """`deploy` `build` as an operator would (`deploys.make_current`, its replay check first):
        the workers of every slot but 0 are replaced by the build's, then it is made current;
        runs begun on the older build finish there. Retried through the outages."""
        started = time.monotonic()
        self.builds.append(build)
        for slot, (worker, _) in list(self.live.items()):
            if slot and worker.proc is not None and worker.proc.returncode is None:
                self.killed.add(worker)
                worker.proc.kill()
        while True:  # a version exists once one of its workers polls
            polling = [w for w, _ in self.live.values() if w.proc and w.proc.returncode is None]
            if any(w.env.get("AGENTLEDGER_BUILD_ID") == build for w in polling):
                break
            await asyncio.sleep(0.5)
        settings = self.lab.settings.model_copy(
            update={"deployment_name": self.deployment, "task_queue": QUEUE}
        )
        operator = RunClient(self.lab.client, settings)
        try:
            while True:
                try:
                    await operator.deploys.make_current(build)
                    break
                except Exception as err:
                    print(f"chaos: mixed: deploy {build}: {err}; trying again", flush=True)
                    await asyncio.sleep(2)
        finally:
            await operator.close()
        self.deploy_seconds.append(round(time.monotonic() - started, 1))
        print(f"chaos: mixed: {build} is current", flush=True)

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
    """Starts the runs, of the kinds drawn, so that about `in_flight` are open at once;
    tracks those ended (the mirror says)."""

    lab: Lab
    pace: Pace
    mix: Mix
    kinds: list[str]
    run_ids: list[str] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    refused_for_deploy: int = 0  # starts refused because a deploy was moving the queue
    failed_top_ups: int = 0
    hold_from: int | None = None  # the first run held until the deploy is done

    async def count_ended(self) -> None:
        open_ = [run_id for run_id in self.run_ids if run_id not in self.done]
        async with self.lab.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT run_id FROM runs WHERE run_id = ANY(%s)
                   AND status IN ('completed', 'failed', 'cancelled')""",
                (open_,),
            )
            newly = [row[0] for row in await cur.fetchall()]
        self.done.update(newly)
        self.mix.ended(newly)

    async def top_up(self) -> None:
        while len(self.run_ids) < self.pace.runs and self.open < self.pace.in_flight:
            index = len(self.run_ids)
            if self.hold_from is not None and index >= self.hold_from:
                return  # the runs after the deploy start once it is done, on the new build
            try:
                run_id = await self.mix.start(self.kinds[index], index, QUEUE)
            except OperationRefused as err:
                if MOVING_TO_CURRENT_BUILD not in str(err):
                    raise
                self.refused_for_deploy += 1  # a promise broken: tried again
                return
            if run_id is None:  # a fork waits for a plain run to end
                return
            self.run_ids.append(run_id)

    @property
    def ended(self) -> int:
        return len(self.done)

    @property
    def open(self) -> int:
        return len(self.run_ids) - self.ended


async def mixed(lab: Lab, pace: Pace, rng: random.Random) -> Outcome:
    """The load, the SIGKILLs, the fault points and the outages together; audited after."""
    started = time.monotonic()
    outcome = Outcome("mixed", pace.runs)
    mix = Mix(lab, pace.sessions, cap=max(1, pace.in_flight // 10))
    await mix.prepare(lab.home / "approvers")
    feed = Feed(lab, pace, mix, draw(pace.runs, rng))
    feed.hold_from = max(1, round(pace.deploy_at * pace.runs))
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
    deploying: asyncio.Task[None] | None = None
    held_since: float | None = None
    held_until: float | None = None
    async with lab.approver_for(feed.run_ids, mix.keys), crew.working():
        await crew.deploy(FIRST_BUILD)  # before any run: every run is pinned to a build
        started = time.monotonic()  # the load, and its bounds, begin now
        feeding = asyncio.create_task(feed.top_up())
        while feed.ended < pace.runs or outages or outage is not None or deploying is None:
            with contextlib.suppress(Exception):  # the server may be down on purpose
                await asyncio.wait_for(feed.count_ended(), 5)
            if feeding.done():  # starts go on beside the chaos, each within the door's bounds
                if not feeding.cancelled() and feeding.exception() is not None:
                    feed.failed_top_ups += 1  # a service down on purpose: tried again
                feeding = asyncio.create_task(feed.top_up())
            now = time.monotonic()
            # The runs held for the deploy wait on it, not on the chaos: that time is not
            # the chaos's.
            held = (held_until or now) - held_since if held_since is not None else 0.0
            if now - started - held > pace.chaos_seconds and outage is None:
                outcome.problems.append(
                    f"{pace.runs - feed.ended} runs still open after {pace.chaos_seconds:.0f} s"
                    " of chaos (the calm workers finish them, the audit checks them)"
                )
                break
            if outage is not None and outage.done():
                await outage
                outage = None
            if deploying is None and feed.hold_from is not None:
                if len(feed.run_ids) >= feed.hold_from:
                    deploying = asyncio.create_task(crew.deploy(NEXT_BUILD))
                    held_since = now
            elif deploying is not None and deploying.done() and feed.hold_from is not None:
                feed.hold_from = None
                held_until = now
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
        feeding.cancel()  # every run started, or the chaos ran out of time
        await asyncio.gather(feeding, return_exceptions=True)
        if deploying is not None:
            try:
                await asyncio.wait_for(deploying, 180)
            except TimeoutError:
                outcome.problems.append(f"{NEXT_BUILD} was not deployed within 180 s")
    # Healthy workers finish what the chaos left open: Temporal's word, not the mirror's (a
    # run the mirror has ended may still have its last workflow task to complete).
    still_open = await lab.open_runs(feed.run_ids)
    calm = [  # of the old build and the new
        await lab.worker(QUEUE, **crew.build(slot)).start(ready_line="polling")
        for slot in range(2 if still_open else 0)
    ]
    print(f"chaos: mixed: waiting for the last runs, then auditing all {pace.runs}", flush=True)
    async with lab.approver_for(feed.run_ids, mix.keys):
        # Then every parent names its children; what is still open says what it waits for.
        for run_id in await lab.wait_ended(feed.run_ids, pace.last_runs_within):
            status = await mix.mirrored_status(run_id)
            outcome.problems.append(f"{run_id} ({mix.kind_of[run_id]}) did not end: {status}")
        children = await children_of(lab.pool, feed.run_ids)
        mix.kind_of.update(dict.fromkeys(children, CHILD))
        everyone = feed.run_ids + list(children)
        outcome.runs = len(everyone)
        effects = {run_id: EFFECTS[kind] for run_id, kind in mix.kind_of.items()}
        await finish(lab, outcome, everyone, started, effects, within=0)
    await mix.stop()
    outcome.problems += await orphans(lab.pool, children)
    outcome.problems += await mix.unsigned()
    if feed.refused_for_deploy:
        outcome.problems.append(
            f"{feed.refused_for_deploy} starts refused while a deploy moved a queue "
            f"({MOVING_TO_CURRENT_BUILD!r}); no start may be refused because of a deploy"
        )
    queued = await mix.queued()
    pinned = Counter(
        [(await deployments.run_version(lab.client, run_id)).build_id for run_id in feed.run_ids]
    )
    sessions = mix.of_kind("session")
    sessions_compacted = await compacted(lab, sessions)
    if sessions and not sessions_compacted:
        outcome.problems.append(f"none of the {len(sessions)} sessions compacted")
    audit_seconds = round(time.monotonic() - started - outcome.seconds, 1)
    for worker in calm:
        await worker.stop()

    outcome.disruptions = crew.sigkills + sum(crew.fired.values()) + sum(struck.values())
    late = await late_writes(lab, feed.run_ids)
    outcome.figures.update(
        {
            "runs by kind": by_kind(mix.kind_of),
            "sessions that compacted": sessions_compacted,
            "session turns answered": sum(mix.turns_taken.values()),
            "say answered": dict(sorted(mix.said.items())),
            "capped runs that queued behind the cap": queued,
            "cap (runs in flight)": mix.cap,
            "approvals granted": lab.approvals,
            "starts that failed (tried again)": feed.failed_top_ups,
            "builds deployed (s each took)": dict(
                zip(crew.builds, crew.deploy_seconds, strict=False)
            ),
            "runs by the build they are pinned to": {
                str(build): count for build, count in sorted(pinned.items(), key=str)
            },
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
        if not queued:
            outcome.problems.append("no capped run ever waited behind its tenant's cap")
    if not pinned[NEXT_BUILD]:
        outcome.problems.append(f"no run started on {NEXT_BUILD}, deployed in the middle")
    return outcome
