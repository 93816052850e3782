"""What durability costs: agentledger beside the peers (the same agent on the OpenAI Agents SDK
with Temporal's plugin and on Pydantic AI's TemporalAgent), a bare agent on Temporal, bare
activities and a PG queue.

    python bench/run.py --systems ours,openai_agents,pydantic_ai,bare_agent   # beside the peers

    python bench/run.py              # the full run (under ~10 minutes on 2 cores)
    python bench/run.py --quick      # a small, fast version (about 2 minutes)
    python bench/run.py --publish    # also write docs/bench/latest.{json,md,png}
    python bench/run.py --stages noisy --publish   # only the noisy-neighbour stage, written
                                                   # to docs/bench/noisy.{json,md}

It starts a fresh embedded stack (Temporal dev server on a SQLite file with WAL, pgserver
Postgres, the offline model) in a temporary folder, measures, prints the tables, writes
JSON and a PNG to --out, and stops everything it started. Figures are printed, never
asserted: a benchmark does not fail on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/run.py` puts bench/, not the repo, on the path
    sys.path.insert(0, str(ROOT))

from psycopg_pool import AsyncConnectionPool  # noqa: E402
from temporalio.client import Client  # noqa: E402

from agentledger.client.scope import Scope  # noqa: E402
from agentledger.client.tenants import Tenants  # noqa: E402
from agentledger.core.config import AgentLedgerConfig  # noqa: E402
from agentledger.core.constants import OFFLINE_MODEL  # noqa: E402
from agentledger.core.wire import ApproveInput  # noqa: E402
from agentledger.dev.offline_model import OfflineModelServer  # noqa: E402
from agentledger.dev.stack import EmbeddedStack, free_port, temporal_binary  # noqa: E402
from agentledger.store.db import open_pool  # noqa: E402
from agentledger.temporal.client import connect  # noqa: E402
from agentledger.workflows import AgentRunWorkflow  # noqa: E402
from agentledger.workflows.changes import for_new_run  # noqa: E402
from bench import (  # noqa: E402
    harness,
    kill_recovery,
    long_run,
    noisy,
    ours,
    pg_queue,
    plot,
    recovery,
    report,
    scale_out,
    server_work,
)
from bench.bare import BARE_ACTIVITY, BareWorkflow  # noqa: E402
from bench.bare_agent import AGENT_MODEL, AGENT_TOOL, AgentTask, BareAgentWorkflow  # noqa: E402
from bench.openai_agents_peer import PEER_MODEL as OA_MODEL  # noqa: E402
from bench.openai_agents_peer import PEER_TOOL as OA_TOOL  # noqa: E402
from bench.openai_agents_peer import PEER_WORKFLOW as OA_WORKFLOW  # noqa: E402
from bench.pydantic_ai_peer import PEER_MODEL as PYD_MODEL  # noqa: E402
from bench.pydantic_ai_peer import PEER_TOOL as PYD_TOOL  # noqa: E402
from bench.pydantic_ai_peer import PEER_WORKFLOW as PYD_WORKFLOW  # noqa: E402
from bench.stats import deltas, fmt, summarize  # noqa: E402

OUR_STEP = "tool.invoke"
# Each agent's tool step, whose acceptance by the run's next workflow task is timed.
STEP_OF = {
    "ours": OUR_STEP,
    "ours_rated": OUR_STEP,
    "ours_remote_tools": OUR_STEP,
    "bare_agent": AGENT_TOOL,
    "openai_agents": OA_TOOL,
    "pydantic_ai": PYD_TOOL,
}
OUR_FIRST_STEP = "model.complete"
# The systems measured side by side: ours, the fair baseline (the same agent loop on bare
# Temporal, bench/bare_agent.py), the floor (N no-op activities, bench/bare.py) and the
# peers a user would otherwise pick: the same agent on the OpenAI Agents SDK with Temporal's
# plugin (bench/openai_agents_peer.py) and on Pydantic AI's TemporalAgent
# (bench/pydantic_ai_peer.py).
PEERS = ("openai_agents", "pydantic_ai")
# ours_rated: ours for a tenant with a model-call rate (one no run reaches, RATED_CALLS_PER_
# SECOND): its model calls leave the run's own queue for the rate-limited one, through the
# server's matching; what a rate costs, beside the default fast path.
# ours runs as a new run does: its read-only, low-risk tool (the benchmark's) as a local
# activity, whose completion its marker in history records. ours_remote_tools: ours with
# `local_read_only_tools: false`, every tool call an activity of its own through matching;
# what that costs, beside the default.
SYSTEMS = ("bare", "bare_agent", *PEERS, "ours", "ours_rated", "ours_remote_tools")
RATED_TENANT = "bench-rated"
RATED_CALLS_PER_SECOND = 1000.0
STEP_ACTIVITY = {**STEP_OF, "bare": BARE_ACTIVITY}
FIRST_ACTIVITY = {
    "ours": OUR_FIRST_STEP,
    "ours_rated": OUR_FIRST_STEP,
    "ours_remote_tools": OUR_FIRST_STEP,
    "bare_agent": AGENT_MODEL,
    "bare": BARE_ACTIVITY,
    "openai_agents": OA_MODEL,
    "pydantic_ai": PYD_MODEL,
}
# Each peer's workflow, started with the task text alone (a str in, a str out).
PEER_WORKFLOWS = {"openai_agents": OA_WORKFLOW, "pydantic_ai": PYD_WORKFLOW}
PG_CONSUMERS = 10  # the same as a worker's Postgres pool (agentledger.store.db.open_pool's default)


@dataclass
class Config:
    mode: str
    levels: list[int]
    steps: int
    level_steps: int
    runs: int
    samples: int
    kills: int
    heartbeat: float
    level_budget: float
    recovery_budget: float
    stages: list[str]
    noisy_runs: int
    out: Path
    publish: bool
    profile: bool
    profile_gil: bool = False
    render: Path | None = None
    systems: tuple[str, ...] = (*SYSTEMS, "pgq")
    note: str = ""
    long_pages: int = 300
    long_budget: float = 600
    scale_processes: tuple[int, ...] = (1, 2, 4)
    scale_levels: tuple[int, ...] = (100, 1000)


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small, fast version")
    parser.add_argument("--levels", help="concurrency levels, e.g. 1,10,100,1000")
    parser.add_argument("--steps", type=int, help="tool steps per run for the latency runs")
    parser.add_argument("--level-steps", type=int, help="tool steps per run at each level")
    parser.add_argument("--runs", type=int, help="runs per system for per-step latency")
    parser.add_argument("--samples", type=int, help="runs for start and approval latency")
    parser.add_argument("--kills", type=int, help="workers to SIGKILL for recovery")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="heartbeat timeout, s")
    parser.add_argument("--level-budget", type=float, help="seconds allowed per level")
    parser.add_argument(
        "--stages",
        default="overhead,throughput,latency,recovery",
        help="which to run: overhead,throughput,latency,recovery (and profile, noisy)",
    )
    parser.add_argument(
        "--noisy-runs", type=int, help="tenant A's burst in the noisy stage (default 500)"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long-run workload only (bench/long_run.py; `--stages long_run`)",
    )
    parser.add_argument(
        "--long-pages", type=int, default=300, help="tool calls of the long run (default 300)"
    )
    parser.add_argument(
        "--long-budget", type=float, default=600, help="seconds each system's long run may take"
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="the scale-out stage only (bench/scale_out.py; `--stages scale_out`)",
    )
    parser.add_argument(
        "--scale-processes", default="1,2,4", help="worker processes of ours to compare"
    )
    parser.add_argument(
        "--scale-levels", default="100,1000", help="concurrent runs of the scale-out stage"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the workers (ours; the bare agent too, if in --systems) at 100 runs",
    )
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="the profile stage counts only samples holding the GIL (py-spy --gil)",
    )
    parser.add_argument(
        "--systems",
        default=",".join((*SYSTEMS, "pgq")),
        help="which systems to measure: ours,openai_agents,pydantic_ai,bare_agent,bare,pgq "
        "(e.g. `--systems ours` to measure one change of ours at one level without the "
        "baselines)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results", help="default: bench/results/"
    )
    parser.add_argument(
        "--publish", action="store_true", help="also write docs/bench/latest.{json,md,png}"
    )
    parser.add_argument(
        "--render", type=Path, help="measure nothing: print the tables of a results JSON file"
    )
    parser.add_argument(
        "--note", default="", help="printed under the machine line, e.g. what else loaded it"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if args.long:
        stages = ["long_run"]
    if args.scale:
        stages = ["scale_out"]
    if args.profile and "profile" not in stages:
        stages.append("profile")
    levels = args.levels or ("1,10" if quick else "1,10,100,1000")
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = set(systems) - {*SYSTEMS, "pgq"}
    if unknown:
        parser.error(
            f"unknown --systems {', '.join(sorted(unknown))}: pick from "
            "ours,openai_agents,pydantic_ai,bare_agent,bare,pgq"
        )
    return Config(
        mode="quick" if quick else "full",
        levels=[int(x) for x in levels.split(",")],
        steps=args.steps or (5 if quick else 20),
        level_steps=args.level_steps or 5,
        runs=args.runs or (3 if quick else 8),
        samples=args.samples or (5 if quick else 20),
        kills=args.kills if args.kills is not None else (3 if quick else 20),
        heartbeat=args.heartbeat,
        level_budget=args.level_budget or (60 if quick else 120),
        recovery_budget=90 if quick else 300,
        stages=stages,
        noisy_runs=args.noisy_runs or (100 if quick else 500),
        out=args.out,
        publish=args.publish,
        profile=args.profile,
        profile_gil=args.profile_gil,
        render=args.render,
        systems=systems,
        note=args.note,
        long_pages=args.long_pages,
        long_budget=args.long_budget,
        scale_processes=tuple(int(x) for x in args.scale_processes.split(",")),
        scale_levels=tuple(int(x) for x in args.scale_levels.split(",")),
    )


def machine_info() -> dict[str, Any]:
    import temporalio

    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 1024**2, 1)
    cli = "temporal CLI ?"
    with contextlib.suppress(Exception):
        cli = subprocess.run(
            [temporal_binary(), "--version"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "temporal_cli": cli,
        "load_average_at_start": list(os.getloadavg()),
    }


class Bench:
    """The stack, a client, a pool and the scripted model: what every stage uses."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.home = Path(tempfile.mkdtemp(prefix="agentledger-bench-"))
        metrics_port = free_port()
        self.stack = EmbeddedStack(
            home=self.home,
            temporal_port=free_port(),
            ui_port=free_port(),
            ui=False,
            metrics_port=metrics_port,
            # The server's own dispatch reads, as a user's cluster has them by default: every
            # system is measured on them (bench/server_pace.py shows what the stack's buy).
            fast_dispatch=False,
        )
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        # Unpaced: a streamed reply (ours asks for one) would otherwise wait 20 ms between
        # pieces, which the bare agent's unstreamed call never does.
        self.model = OfflineModelServer(ours.responder, stream_pause_seconds=0)
        self.endpoints: dict[str, str] = {}
        self.partial: dict[str, dict[str, Any]] = {}
        self.client: Client
        self.pool: AsyncConnectionPool
        self.rated_queues: set[str] = set()  # queues whose RATED_TENANT has its rate

    async def __aenter__(self) -> Bench:
        self.endpoints = await asyncio.to_thread(self.stack.start)
        self.model.start()
        # The stack is up once Temporal's frontend serves (EmbeddedStack.start_temporal).
        self.client = await connect(AgentLedgerConfig.load(self.worker_env()), identity="bench")
        self.pool = await open_pool(self.endpoints["database_url"], max_size=10)
        await pg_queue.setup(self.pool)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.pool.close()
        self.model.stop()
        await asyncio.to_thread(self.stack.stop)
        shutil.rmtree(self.home, ignore_errors=True)

    def worker_env(self) -> dict[str, str]:
        """For bench workers: the scripted model, not the stack's planner."""
        return {
            "TEMPORAL_ADDRESS": self.endpoints["temporal_address"],
            "DATABASE_URL": self.endpoints["database_url"],
            "OPENAI_BASE_URL": self.model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": str(self.home),
        }

    def user_env(self) -> dict[str, str]:
        """For `worker.py` as users run it: the stack's offline planner."""
        return {**self.worker_env(), "OPENAI_BASE_URL": self.endpoints["openai_base_url"]}

    def others(self) -> dict[str, Callable[[], list[int]]]:
        temporal = self.stack._temporal
        pid = temporal.pid if temporal is not None else None
        return {
            "temporal": lambda: [pid] if pid is not None else [],
            "postgres": lambda: harness.postgres_pids(self.home / "pg"),
        }

    async def start(
        self,
        system: str,
        workflow_id: str,
        steps: int,
        queue: str,
        *,
        heartbeat_seconds: float = 30,
    ) -> None:
        if system in ("ours", "ours_remote_tools"):
            # As `starter.py run` starts it: stamped with the generation new runs take and
            # the engine's choices.
            spec = for_new_run(
                ours.run_spec(
                    steps,
                    key=workflow_id,
                    remote_tools=system == "ours_remote_tools",
                    heartbeat_seconds=heartbeat_seconds,
                )
            )
            await ours.start_run(self.client, spec, workflow_id, queue)
        elif system == "ours_rated":
            # As the door starts a run of a tenant with a model-call rate.
            if queue not in self.rated_queues:
                settings = AgentLedgerConfig.model_construct(task_queue=queue)
                tenants = Tenants(Scope.over(self.client, self.pool, config=settings))
                await tenants.set(RATED_TENANT, {"model_calls_per_second": RATED_CALLS_PER_SECOND})
                self.rated_queues.add(queue)
            run = ours.run_spec(
                steps, key=workflow_id, heartbeat_seconds=heartbeat_seconds
            ).model_copy(update={"tenant": RATED_TENANT})
            spec = for_new_run(run).model_copy(update={"model_calls_rated": True})
            await ours.start_run(self.client, spec, workflow_id, queue, fair=True)
        elif system in PEER_WORKFLOWS:
            await self.client.start_workflow(
                PEER_WORKFLOWS[system],
                ours.bench_task(steps),
                id=workflow_id,
                task_queue=queue,
            )
        elif system == "bare_agent":
            await self.client.start_workflow(
                BareAgentWorkflow.run,
                AgentTask(task=ours.bench_task(steps), model=OFFLINE_MODEL),
                id=workflow_id,
                task_queue=queue,
            )
        else:
            await self.client.start_workflow(
                BareWorkflow.run, steps, id=workflow_id, task_queue=queue
            )

    async def run_one(self, system: str, workflow_id: str, steps: int, queue: str) -> None:
        await self.start(system, workflow_id, steps, queue)
        await asyncio.wait_for(self.client.get_workflow_handle(workflow_id).result(), 120)

    async def step_rows(self, run_id: str) -> list[tuple[str, float]]:
        """(step_id, epoch when the row became final) of a run's tool steps, in order."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT step_id, extract(epoch FROM updated_at)::float8 FROM steps
                   WHERE run_id = %s AND type = 'tool_call' AND final ORDER BY seq""",
                (run_id,),
            )
            return [(str(a), float(b)) for a, b in await cur.fetchall()]

    async def acceptance_lags(self, workflow_ids: list[str], step: str) -> list[float]:
        """Seconds from each tool step's completion to the workflow task that accepted it."""
        lags: list[float] = []
        for workflow_id in workflow_ids:
            lags += (await harness.run_times(self.client, workflow_id)).acceptance_lags(step)
        return lags

    async def mirror_lags(
        self, workflow_ids: list[str]
    ) -> tuple[list[float], dict[str, list[float]]]:
        """Seconds from each tool step's completion (its ActivityTaskCompleted, or a local
        activity's as its marker records it) to its final row in Postgres,
        and that lag in its three parts, from one read of each run's history and rows: the
        workflow task that accepted the step scheduled the activity carrying its rows
        (`accepted`: completion to that scheduling), the carrier waited to start
        (`dispatched`: eager, or through matching and a free slot), then wrote them in its
        statement (`written`: its start to the row). A step written otherwise has no parts."""
        lags: list[float] = []
        parts: dict[str, list[float]] = {"accepted": [], "dispatched": [], "written": []}
        for workflow_id in workflow_ids:
            times = await harness.run_times(self.client, workflow_id)
            done = [a.completed for a in times.of(OUR_STEP) if a.completed is not None]
            rows = await self.step_rows(workflow_id)
            for completed, (_, at) in zip(done, rows, strict=False):
                lags.append(at - completed)
                carrier = min(
                    (a for a in times.activities if a.scheduled >= completed),
                    key=lambda a: a.scheduled,
                    default=None,
                )
                if carrier is None or carrier.started is None or at < carrier.started:
                    continue
                parts["accepted"].append(carrier.scheduled - completed)
                parts["dispatched"].append(carrier.started - carrier.scheduled)
                parts["written"].append(at - carrier.started)
        return lags, parts


def measured(cfg: Config) -> list[str]:
    """The Temporal systems this run measures (`--systems`), in the table's order."""
    return [s for s in SYSTEMS if s in cfg.systems]


def log(message: str) -> None:
    print(message, flush=True)


def ms(values: list[float]) -> dict[str, Any]:
    return summarize([v * 1000 for v in values])


# ------------------------------------------------------------------ 1. step overhead


async def step_times(b: Bench, workflow_ids: list[str], step: str, steps: int) -> dict[str, Any]:
    """Per-step gaps and wall time per step of these runs, from their histories."""
    gaps: list[float] = []
    walls: list[float] = []
    scheduled: list[int] = []
    for workflow_id in workflow_ids:
        times = await harness.run_times(b.client, workflow_id)
        gaps += deltas(sorted(a.completed for a in times.of(step) if a.completed))
        scheduled.append(sum(1 for a in times.activities if not a.local))
        if times.closed is not None:
            walls.append((times.closed - times.started) / steps)
    return {
        "step_ms": ms(gaps),
        "wall_per_step_ms": ms(walls),
        "activities_per_run": max(scheduled, default=0),
    }


async def stage_overhead(b: Bench) -> dict[str, Any]:
    cfg = b.cfg
    out: dict[str, Any] = {
        "steps": cfg.steps,
        "runs": cfg.runs,
        "method": (
            "per-step latency = gap between consecutive step completions "
            f"(ActivityTaskCompleted of {OUR_STEP} / {AGENT_TOOL} / {BARE_ACTIVITY}, or "
            "for a local activity the completion time its marker records) in each run's "
            "history; ours includes the run's mirror batch, which each step's activity "
            "applies with its claim, and the attempt's mirror writes. The systems take "
            "turns, run by run, each on its own worker; 'one run at a time' leaves 2 s "
            "after each run, 'back to back' none. Activities per run: the most any run "
            "scheduled through the server (local activities and retries not counted)."
        ),
    }
    systems = measured(cfg)
    async with contextlib.AsyncExitStack() as workers:
        queues = {system: harness.new_queue(f"{system}-overhead") for system in systems}
        for system, queue in queues.items():
            await workers.enter_async_context(
                harness.running(harness.bench_worker(system, queue, b.worker_env()))
            )
        for mode, gap in (("isolated", 2.0), ("back_to_back", 0.0)):
            ids: dict[str, list[str]] = {system: [] for system in systems}
            # The systems take turns, run by run, so a slower spell of the machine falls on
            # each of them alike and their ratio holds.
            for i in range(cfg.runs):
                for system, queue in queues.items():
                    workflow_id = f"{queue}-{mode}-{i}"
                    await b.run_one(system, workflow_id, cfg.steps, queue)
                    ids[system].append(workflow_id)
                    await asyncio.sleep(gap)
            for system in systems:
                out.setdefault(system, {})[mode] = await step_times(
                    b, ids[system], STEP_ACTIVITY[system], cfg.steps
                )
            if mode == "isolated" and "ours" in systems:
                out["mirror_lag_ms"] = ms((await b.mirror_lags(ids["ours"]))[0])
    for system in systems:
        isolated = out[system]["isolated"]
        log(
            f"  {system}: step p50 {fmt(isolated['step_ms']['p50'], ' ms')}, wall per step "
            f"p50 {fmt(isolated['wall_per_step_ms']['p50'], ' ms')}"
        )
    gaps, walls = [], []
    for _ in range(cfg.runs if "pgq" in cfg.systems else 0):
        result = await pg_queue.run(
            b.pool, runs=1, steps=cfg.steps, consumers=PG_CONSUMERS, budget_seconds=60
        )
        gaps += result.step_gaps
        walls += [d / cfg.steps for d in result.durations]
        await asyncio.sleep(0.2)
    if gaps:
        out["pgq"] = {"isolated": {"step_ms": ms(gaps), "wall_per_step_ms": ms(walls)}}
    return out


# ------------------------------------------------------------------ 2. throughput and scale


async def sampled_level(
    b: Bench, system: str, queue: str, level: int, worker_pid: int
) -> tuple[harness.LevelResult, harness.Sampler]:
    """`level` runs of `system` at once on `queue`, with its worker's CPU and memory sampled."""
    async with harness.Sampler(worker_pid, b.others()) as sampler:
        result = await harness.run_level(
            b.client,
            level=level,
            steps=b.cfg.level_steps,
            task_queue=queue,
            start=lambda wid: b.start(system, wid, b.cfg.level_steps, queue),
            budget_seconds=b.cfg.level_budget,
            prefix=queue,
        )
    return result, sampler


async def one_level(b: Bench, system: str, level: int) -> tuple[dict[str, Any], list[str]]:
    cfg = b.cfg
    queue = harness.new_queue(f"{system}-l{level}")
    worker = harness.bench_worker(system, queue, b.worker_env())
    async with harness.running(worker):
        server_before = server_work.scrape(b.metrics_url)
        collector_before = await worker.collector_totals()
        result, sampler = await sampled_level(b, system, queue, level, worker.pid)
        collector_after = await worker.collector_totals()
        server_after = server_work.scrape(b.metrics_url)
    steps_done = max(result.completed * cfg.level_steps, 1)
    steps_per_second = result.steps_per_second
    if result.timed_out and result.cut_off is not None:
        # Completed runs undercount a level cut short: count every tool step done by the
        # cut-off, from the histories (a local activity's by its marker).
        if system in STEP_OF:
            found = await harness.steps_completed(
                b.client, result.workflow_ids, STEP_OF[system], result.cut_off
            )
        else:
            found = steps_done
        steps_done = max(found, 1)
        steps_per_second = steps_done / result.wall_seconds
    durations = sorted(result.durations)
    row = {
        "started": result.started,
        "completed": result.completed,
        "timed_out": result.timed_out,
        "steps_done": steps_done,
        "wall_seconds": result.wall_seconds,
        "runs_per_second": result.runs_per_second,
        "steps_per_second": steps_per_second,
        "step_ms_p50": (
            summarize(durations)["p50"] * 1000 / cfg.level_steps if durations else None
        ),
        "run_seconds": summarize(durations),
        "rss_mb": sampler.peak_rss / 1e6 if sampler.peak_rss else None,
        "worker_cpu_ms_per_step": sampler.cpu["worker"] * 1000 / steps_done,
        "temporal_cpu_ms_per_step": sampler.cpu.get("temporal", 0) * 1000 / steps_done,
        "postgres_cpu_ms_per_step": sampler.cpu.get("postgres", 0) * 1000 / steps_done,
        "server_work_per_step": server_work.per_step(server_before, server_after, steps_done),
    }
    if collector_before is not None and collector_after is not None:
        row["gc_ms_per_step"] = (collector_after[0] - collector_before[0]) * 1000 / steps_done
        row["gc_collections"] = collector_after[1] - collector_before[1]
    completed = [w for w in result.workflow_ids if w in result.close_times]
    if completed:  # one run's history: what the server stores per run
        history = await b.client.get_workflow_handle(completed[0]).fetch_history()
        row["history_events"] = len(history.events)
        row["history_bytes"] = sum(event.ByteSize() for event in history.events)
    return row, completed


async def stage_throughput(b: Bench) -> dict[str, Any]:
    cfg = b.cfg
    out: dict[str, Any] = {"steps_per_run": cfg.level_steps, "levels": []}
    b.partial["throughput"] = out  # the levels done, should the stage run out of time
    lag_level = max((x for x in cfg.levels if x <= 100), default=None)
    for level in cfg.levels:
        row: dict[str, Any] = {"level": level}
        for system in measured(cfg):
            try:
                row[system], completed = await one_level(b, system, level)
            except Exception as err:
                row[system] = {"error": f"{type(err).__name__}: {err}"}
                continue
            if level != lag_level:
                continue
            sample = completed[:: max(1, len(completed) // 20)][:20]
            if system in STEP_OF:
                accepted = out.setdefault("acceptance_lag_under_load", {"level": level})
                accepted[system] = ms(await b.acceptance_lags(sample, STEP_OF[system]))
            if system == "ours":
                lags, parts = await b.mirror_lags(sample)
                out["mirror_lag_under_load"] = {
                    "level": level,
                    "runs_sampled": len(sample),
                    "ms": ms(lags),
                    "parts_ms": {part: ms(values) for part, values in parts.items()},
                }
        if "pgq" in cfg.systems:
            pgq = await pg_queue.run(
                b.pool,
                runs=level,
                steps=cfg.level_steps,
                consumers=PG_CONSUMERS,
                budget_seconds=cfg.level_budget,
            )
            row["pgq"] = {
                "started": pgq.runs,
                "completed": pgq.completed_runs,
                "timed_out": pgq.timed_out,
                "runs_per_second": pgq.runs_per_second,
                "steps_per_second": pgq.steps_per_second,
                "step_ms_p50": (
                    summarize(pgq.durations)["p50"] * 1000 / cfg.level_steps
                    if pgq.durations
                    else None
                ),
                "consumers": pgq.consumers,
            }
        out["levels"].append(row)
        rates = ", ".join(
            f"{k} {fmt((row.get(k) or {}).get('steps_per_second'))}"
            for k in (*SYSTEMS, "pgq")
            if k in cfg.systems
        )
        log(f"  {level:>5} concurrent, steps/s: {rates}")
    return out


# ------------------------------------------------------------------ 3. start and approval


async def stage_latency(b: Bench) -> dict[str, Any]:
    cfg = b.cfg
    out: dict[str, Any] = {"samples": cfg.samples}
    firsts: dict[str, list[float]] = {}
    for system in measured(cfg):
        first = FIRST_ACTIVITY[system]
        queue = harness.new_queue(f"{system}-start")
        async with harness.running(harness.bench_worker(system, queue, b.worker_env())):
            sent: dict[str, float] = {}
            for i in range(cfg.samples):
                workflow_id = f"{queue}-{i}"
                sent[workflow_id] = time.time()
                await b.run_one(system, workflow_id, 1, queue)
                await asyncio.sleep(0.3)
            firsts[system] = []
            for workflow_id, t0 in sent.items():
                times = await harness.run_times(b.client, workflow_id)
                step = next(a for a in times.activities if a.name == first)
                if step.started is not None:
                    firsts[system].append(step.started - t0)
    out["start_to_first_step_ms"] = {k: ms(v) for k, v in firsts.items()}
    out["start_method"] = (
        "client clock before start_workflow → ActivityTaskStarted of the first step "
        f"({OUR_FIRST_STEP} for ours, which flushes the run row first; {AGENT_MODEL} for the "
        f"bare agent; {BARE_ACTIVITY} for bare activities)"
    )

    queue = harness.new_queue("ours-approval")
    async with harness.running(harness.bench_worker("ours", queue, b.worker_env())):
        ids = [f"{queue}-{i}" for i in range(cfg.samples)]
        for workflow_id in ids:
            await b.client.start_workflow(
                AgentRunWorkflow.run,
                for_new_run(ours.gated_spec(key=workflow_id)),
                id=workflow_id,
                task_queue=queue,
            )
        updates: list[float] = []
        sent_at: dict[str, float] = {}
        for workflow_id in ids:
            handle = b.client.get_workflow_handle_for(AgentRunWorkflow.run, workflow_id)
            pending = None
            deadline = time.monotonic() + 30
            while pending is None and time.monotonic() < deadline:
                pending = await handle.query(AgentRunWorkflow.get_pending_approval)
                if pending is None:
                    await asyncio.sleep(0.05)
            if pending is None:
                continue
            decision = ApproveInput(action_hash=pending.action_hash, by="bench", role="approver")
            t0 = time.time()
            await handle.execute_update(AgentRunWorkflow.approve, decision)
            updates.append(time.time() - t0)
            sent_at[workflow_id] = t0
            await asyncio.sleep(0.2)
        to_step: list[float] = []
        for workflow_id, t0 in sent_at.items():
            await asyncio.wait_for(b.client.get_workflow_handle(workflow_id).result(), 60)
            times = await harness.run_times(b.client, workflow_id)
            step = next((a for a in times.of(OUR_STEP) if a.started), None)
            if step is not None and step.started is not None:
                to_step.append(step.started - t0)
    out["approval_update_ms"] = ms(updates)
    out["approval_to_step_ms"] = ms(to_step)
    return out


# ------------------------------------------------------------------ 4. recovery


async def stage_recovery(b: Bench) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if any(system != "ours" for system in measured(b.cfg)):
        log("  SIGKILL under in-flight model calls, every agent alike (bench/kill_recovery.py)")
        out["kill_under_model_call"] = {}
        for system in measured(b.cfg):
            if system in ("bare", "ours_remote_tools", "ours_rated"):  # none; ours' alike
                continue
            out["kill_under_model_call"][system] = found = await kill_recovery.measure(
                b.client,
                system,
                b.worker_env(),
                lambda workflow_id, queue, system=system: b.start(
                    system, workflow_id, 1, queue, heartbeat_seconds=b.cfg.heartbeat
                ),
                FIRST_ACTIVITY[system],
                runs=max(1, min(b.cfg.kills, 5)),
                budget_seconds=150,
            )
            log(f"  {system}: kill → retry p50 {fmt(found['kill_to_retry_s']['p50'], ' s')}")
    if "ours" not in b.cfg.systems:
        return out
    return out | await recovery.measure(
        b.client,
        b.pool,
        b.user_env(),
        kills=b.cfg.kills,
        heartbeat_seconds=b.cfg.heartbeat,
        budget_seconds=b.cfg.recovery_budget,
        log=log,
    )


# ------------------------------------------------------------------ profile


async def stage_profile(b: Bench) -> dict[str, Any]:
    """py-spy (all threads) on our worker at 100 concurrent runs, a summary by function; and
    on the bare agent's and the OpenAI Agents peer's workers at the same level, when
    `--systems` names them, so a share of ours reads beside what the same agent loop pays on
    bare Temporal and on the fastest peer."""
    out = await profile_system(b, "ours")
    for other in ("bare_agent", "openai_agents"):
        if other in b.cfg.systems:
            out[other] = await profile_system(b, other)
    return out


async def profile_system(b: Bench, system: str) -> dict[str, Any]:
    """One system's worker under py-spy at 100 concurrent runs."""
    cfg = b.cfg
    level = 100
    queue = harness.new_queue(f"{system}-profile")
    worker = harness.bench_worker(system, queue, b.worker_env())
    raw = cfg.out / ("profile-py-spy.txt" if system == "ours" else f"profile-py-spy-{system}.txt")
    cfg.out.mkdir(parents=True, exist_ok=True)
    commits_before = await postgres_commits(b.pool)
    async with harness.running(worker), harness.py_spy(worker.pid, raw, gil=cfg.profile_gil):
        result, sampler = await sampled_level(b, system, queue, level, worker.pid)
    steps_done = max(result.completed * cfg.level_steps, 1)
    # Counted once the worker is gone: a backend reports its transactions as it exits.
    await asyncio.sleep(1.0)
    commits = await postgres_commits(b.pool) - commits_before
    out: dict[str, Any] = {
        "level": level,
        "postgres_commits_per_step": commits / steps_done,
        "steps_per_run": cfg.level_steps,
        "steps_per_second": result.steps_per_second,
        "runs_per_second": result.runs_per_second,
        "worker_cpu_ms_per_step": sampler.cpu["worker"] * 1000 / steps_done,
        "temporal_cpu_ms_per_step": sampler.cpu.get("temporal", 0) * 1000 / steps_done,
        "rss_mb": sampler.peak_rss / 1e6,
        "raw": str(raw) if raw.exists() else None,
    }
    if raw.exists():
        out["top"] = summarize_profile(raw)
    return out


async def postgres_commits(pool: AsyncConnectionPool) -> int:
    """Transactions the database has committed so far (all its connections)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


CATEGORIES = [
    ("workflow sandbox (import, exec, restrictions)", ("workflow_sandbox",)),
    ("psycopg (all Postgres I/O: mirror, ledger, journal)", ("psycopg",)),
    ("temporal bridge (poll/complete, payload visitors)", ("temporalio/bridge",)),
    ("pydantic conversion", ("pydantic", "temporalio/contrib/pydantic", "converter.py")),
    ("openai/httpx (model calls)", ("openai/", "httpx", "httpcore")),
    # Within psycopg's share: the mirror's batches (through the group commit), and each
    # activity attempt's own claim and report.
    (
        "mirror.sync writes",
        ("MirrorStore.sync ", "MirrorStore._apply ", "MirrorStore._write_", "GroupCommit."),
    ),
    (
        "attempt writes (begin/end_attempt)",
        ("MirrorStore.begin_attempt", "MirrorStore.end_attempt"),
    ),
]


# Where a worker's time goes, each sample counted once, in the first part its stack passes
# through: the two workers' parts side by side say what ours pays that the bare agent does not.
PARTS = [
    ("Postgres I/O (psycopg: mirror, ledger, journal, conversation)", ("psycopg",)),
    ("model calls (openai, httpx)", ("openai/", "httpx", "httpcore")),
    (
        "the SDK's payload passes (visitors, converter contexts, codecs)",
        (
            "encode_completion",
            "decode_activation",
            "get_serialization_context",
            "get_external_store_context",
            "_command_aware_visitor",
            "temporalio/bridge/_visitor",
        ),
    ),
    ("workflow code (in the sandbox)", ("_Instance.activate",)),
    ("a run's sandbox (its modules, executed per run)", ("_create_workflow_instance",)),
    ("the bridge (polls, completions)", ("temporalio/bridge",)),
    ("pydantic (inputs and results)", ("pydantic",)),
    (
        "our activities' own code (claims, leases, tools, the payload guard)",
        ("agentledger/", "bench/bare_agent.py", "bench/ours.py"),
    ),
]
OTHER_PART = "the rest (the event loop, threads, the SDK's task handling)"
# Leaves that are a thread waiting, not working (py-spy does not always see it idle): the
# workflow thread pool waiting for an activation, the event loop waiting in epoll.
WAITING = ("_worker (concurrent/futures/thread.py", "EpollSelector.select (selectors.py")


def summarize_profile(raw: Path) -> dict[str, Any]:
    """Share of sampled time by category (inclusive), of working time by part (each sample
    once, waits left out) and the top self-time functions."""
    total = 0
    by_cat = dict.fromkeys([c for c, _ in CATEGORIES], 0)
    by_part = dict.fromkeys([*(p for p, _ in PARTS), OTHER_PART], 0)
    self_time: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        if " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():  # a frame whose text py-spy split over lines
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for cat, needles in CATEGORIES:
            if any(any(x in f for x in needles) for f in frames):
                by_cat[cat] += n
        if not frames[-1].startswith(WAITING):
            part = next(
                (p for p, needles in PARTS if any(any(x in f for x in needles) for f in frames)),
                OTHER_PART,
            )
            by_part[part] += n
        self_time[frames[-1]] = self_time.get(frames[-1], 0) + n
    top = sorted(self_time.items(), key=lambda kv: -kv[1])[:15]
    return {
        "samples": total,
        "inclusive_share": {k: round(v / total, 3) for k, v in by_cat.items()} if total else {},
        "part_share": {k: round(v / working, 3) for k, v in by_part.items()}
        if (working := sum(by_part.values()))
        else {},
        "top_self": [(name, round(n / total, 3)) for name, n in top] if total else [],
    }


# ------------------------------------------------------------------ main

NOISY_BUDGET = 600.0  # seconds each mode may take to finish B's runs


async def stage_noisy(b: Bench) -> dict[str, Any]:
    """Its own stacks (fairness is a server setting): the bench stack stays idle meanwhile."""
    return await noisy.noisy_neighbour(runs=b.cfg.noisy_runs, budget=NOISY_BUDGET)


async def stage_long_run(b: Bench) -> dict[str, Any]:
    """The long run of each system; with --profile, its worker under py-spy throughout."""
    b.cfg.out.mkdir(parents=True, exist_ok=True)
    out = await long_run.stage(
        b.client,
        b.worker_env(),
        b.others(),
        systems=b.cfg.systems,
        pages=b.cfg.long_pages,
        budget_seconds=b.cfg.long_budget,
        profile_dir=b.cfg.out if b.cfg.profile else None,
        log=log,
    )
    summarize_profiles(out)
    return out


def summarize_profiles(stage: dict[str, Any]) -> None:
    """Each profiled system's py-spy record summarised beside its figures."""
    for system in stage["systems"]:
        raw = (stage.get(system) or {}).get("profile_raw")
        if raw and Path(raw).exists():
            stage[system]["top"] = summarize_profile(Path(raw))


async def stage_scale_out(b: Bench) -> dict[str, Any]:
    b.partial["scale_out"] = out = {}  # the rows done, should the stage run out of time
    return await scale_out.stage(
        out,
        b.client,
        b.worker_env(),
        b.others(),
        lambda workflow_id, queue: b.start("ours", workflow_id, b.cfg.level_steps, queue),
        processes=b.cfg.scale_processes,
        levels=b.cfg.scale_levels,
        steps=b.cfg.level_steps,
        budget_seconds=b.cfg.level_budget,
        log=log,
    )


STAGES: dict[str, tuple[Callable[[Bench], Awaitable[dict[str, Any]]], str]] = {
    "overhead": (
        stage_overhead,
        "1. step overhead, ours vs bare agent vs bare activities vs PG queue",
    ),
    "throughput": (stage_throughput, "2. throughput and scale"),
    "latency": (stage_latency, "3. start and approval latency"),
    "recovery": (stage_recovery, "4. recovery after SIGKILL"),
    "profile": (stage_profile, "profile: py-spy on the workers at 100 concurrent runs"),
    "noisy": (stage_noisy, "5. noisy neighbour: one tenant's burst, fairness off and on"),
    "long_run": (stage_long_run, "6. long run: 300 tool calls of 4 KB, one per model turn"),
    "scale_out": (stage_scale_out, "7. scale-out: 1, 2, 4 worker processes of ours"),
}
DEFAULT_STAGES = {"overhead", "throughput", "latency", "recovery"}


def stage_budget(cfg: Config, stage: str) -> float:
    if stage == "throughput":  # each system's level, its worker's start and its history
        return len(cfg.levels) * (len(measured(cfg)) * (cfg.level_budget + 30) + 60)
    if stage == "recovery":
        return cfg.recovery_budget + 150 + 200 * len(measured(cfg))
    if stage == "noisy":
        return 2 * NOISY_BUDGET + 300
    if stage == "long_run":  # each system's run, its worker's start and its history
        return len(long_run.SYSTEMS) * (cfg.long_budget + 120)
    if stage == "scale_out":  # each row's level, its workers' start and the histories read
        return len(cfg.scale_levels) * len(cfg.scale_processes) * (cfg.level_budget + 300)
    return 600


async def run(cfg: Config) -> dict[str, Any]:
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "machine": machine_info(),
        "note": cfg.note,
        "errors": {},
    }
    t0 = time.monotonic()
    async with Bench(cfg) as b:
        async with b.pool.connection() as conn:
            cur = await conn.execute("SHOW server_version")
            row = await cur.fetchone()
            results["machine"]["postgres"] = f"PostgreSQL {row[0] if row else '?'} (pgserver)"
        log(f"stack up in {time.monotonic() - t0:.1f}s at {b.home}")
        for stage in cfg.stages:
            fn, title = STAGES[stage]
            log(f"== {title}")
            started = time.monotonic()
            try:
                results[stage] = await asyncio.wait_for(fn(b), stage_budget(cfg, stage))
            except Exception as err:
                results["errors"][stage] = f"{type(err).__name__}: {err}"
                if b.partial.get(stage):  # what it measured before it ran out of time
                    results[stage] = b.partial[stage]
                log(f"  {stage} did not finish: {results['errors'][stage]}")
                traceback.print_exc()
            log(f"  ({time.monotonic() - started:.0f}s)")
    results["wall_seconds"] = time.monotonic() - t0
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return results


def write_outputs(cfg: Config, results: dict[str, Any]) -> str:
    text = report.full_report(results)
    cfg.out.mkdir(parents=True, exist_ok=True)
    stamp = results["started_at"].replace(":", "").replace("-", "")[:15]
    json_path = cfg.out / f"bench-{stamp}.json"
    json_path.write_text(json.dumps(results, indent=2, default=str))
    (cfg.out / "latest.json").write_text(json.dumps(results, indent=2, default=str))
    (cfg.out / "latest.md").write_text(text + "\n")
    png = plot.draw(results, cfg.out / "latest.png")
    if cfg.publish:
        docs = ROOT / "docs" / "bench"
        docs.mkdir(parents=True, exist_ok=True)
        # A run of some stages only is published under their names, beside the full run.
        name = (
            "latest"
            if DEFAULT_STAGES <= set(cfg.stages)
            else "-".join(cfg.stages).replace("_", "-")
        )
        (docs / f"{name}.json").write_text(json.dumps(results, indent=2, default=str))
        (docs / f"{name}.md").write_text(text + "\n")
        if png is not None and name == "latest":
            shutil.copy(png, docs / "latest.png")
    log(f"\nwrote {json_path}, {cfg.out / 'latest.md'}" + (f", {png}" if png else ""))
    return text


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.render is not None:
        print(report.full_report(json.loads(cfg.render.read_text())))
        return 0
    results = asyncio.run(run(cfg))
    text = write_outputs(cfg, results)
    print("\n" + text)
    if "profile" in results:
        print("\nprofile:", json.dumps(results["profile"], indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
