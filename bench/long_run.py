"""The long-run workload, the same for every system: one run of N tool
calls, one per model turn, each result a 4 KB page, so every model call sees the
conversation grown by one page (`bench.ours.responder`, "bench long: N pages").

Per system, read from Temporal's history once the run has ended: history bytes and events
at chosen steps (for ours, summed over its continue-as-new chain, and the run that held the
step on its own), history bytes, events and time per step near the end against the start
(the mean of a window of steps), the worker's peak RSS, and whether the run finished: a run
the server stopped (its history limits) or the budget cut off is reported with the step where
it stopped and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from agentledger.core.constants import OFFLINE_MODEL
from agentledger.workflows.changes import for_new_run
from bench import harness, ours
from bench import openai_agents_peer as oa
from bench import pydantic_ai_peer as pyd
from bench.bare_agent import AGENT_TOOL, AgentTask, BareAgentWorkflow
from bench.stats import fmt, fmt_ratio, ratio

SYSTEMS = ("ours", "openai_agents", "pydantic_ai", "bare_agent")
TOOL_ACTIVITY = {
    "ours": "tool.invoke",
    "openai_agents": oa.PEER_LONG_TOOL,
    "pydantic_ai": pyd.PEER_LONG_TOOL,
    "bare_agent": AGENT_TOOL,
}
MARKS = (50, 100, 200, 300)
WINDOW = 10  # steps averaged at the start and at the end
# Events per page of history: the peers' late events carry the whole conversation (over a
# megabyte each), and a page must stay under gRPC's message limit.
HISTORY_PAGE = 10


async def start(
    client: Client, system: str, workflow_id: str, queue: str, pages: int, history_events: int
) -> WorkflowHandle[Any, Any]:
    """Start the long run of `system`: its first run's handle."""
    if system == "ours":
        spec = ours.long_run_spec(pages, key=workflow_id, history_events_limit=history_events)
        return await ours.start_run(client, for_new_run(spec), workflow_id, queue)
    if system == "bare_agent":
        task = AgentTask(
            task=ours.long_task(pages),
            model=OFFLINE_MODEL,
            tool=ours.PAGE_TOOL,
            max_turns=pages + 5,
        )
        return await client.start_workflow(
            BareAgentWorkflow.run, task, id=workflow_id, task_queue=queue
        )
    workflow = oa.PEER_LONG_WORKFLOW if system == "openai_agents" else pyd.PEER_LONG_WORKFLOW
    return await client.start_workflow(
        workflow, ours.long_task(pages), id=workflow_id, task_queue=queue
    )


@dataclass
class StepMark:
    """Where the history stood when a tool step completed."""

    at: float  # the step's completion, epoch seconds
    chain_bytes: int
    chain_events: int
    run_bytes: int  # of the run (in a continue-as-new chain) that holds the step
    run_events: int
    run_index: int


@dataclass
class ChainHistory:
    marks: list[StepMark]
    runs: list[tuple[int, int]]  # (bytes, events) of each run in the chain
    closing: str  # the last run's closing event, e.g. COMPLETED, TERMINATED
    reason: str | None  # why a run that did not complete ended


CLOSING = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
}


async def read_chain(
    client: Client, workflow_id: str, first_run_id: str, tool: str
) -> ChainHistory:
    """Walk a run's continue-as-new chain from its first run, marking each `tool` completion
    (a local activity's at its marker, with the completion time the marker records)."""
    marks: list[StepMark] = []
    runs: list[tuple[int, int]] = []
    chain_bytes = chain_events = 0
    closing, reason = "running", None
    run_id: str | None = first_run_id
    while run_id is not None:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        run_bytes = run_events = 0
        names: dict[int, str] = {}
        run_id = None
        async for event in handle.fetch_history_events(page_size=HISTORY_PAGE):
            size = event.ByteSize()
            run_bytes += size
            run_events += 1
            chain_bytes += size
            chain_events += 1
            kind = event.event_type
            completed: float | None = None
            if kind == EventType.EVENT_TYPE_MARKER_RECORDED:
                local = harness.local_activity_times(event)
                if local is not None and local.name == tool:
                    completed = local.completed
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                names[event.event_id] = (
                    event.activity_task_scheduled_event_attributes.activity_type.name
                )
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                if names.get(attrs.scheduled_event_id) == tool:
                    completed = harness.event_time(event)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                run_id = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
            elif kind in CLOSING:
                closing = CLOSING[kind]
                if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
                    reason = event.workflow_execution_terminated_event_attributes.reason
                elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                    reason = event.workflow_execution_failed_event_attributes.failure.message
            if completed is not None:
                marks.append(
                    StepMark(completed, chain_bytes, chain_events, run_bytes, run_events, len(runs))
                )
        runs.append((run_bytes, run_events))
    return ChainHistory(marks, runs, closing, reason)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def per_step(values: Sequence[float], window: int) -> tuple[float | None, float | None]:
    """Mean increase per step over the first `window` steps after step 1, and the last."""
    steps = [b - a for a, b in itertools.pairwise(values)]
    if len(steps) < 2 * window:  # too short for two windows: halves
        window = max(1, len(steps) // 2)
    return _mean(steps[:window]), _mean(steps[-window:])


def window_ms(marks: Sequence[StepMark], step: int, window: int) -> float | None:
    """Mean time per step over the `window` steps up to `step` (1-based)."""
    first = max(0, step - 1 - window)
    span = step - 1 - first
    return (marks[step - 1].at - marks[first].at) * 1000 / span if span else None


def figures(chain: ChainHistory, marks_at: Sequence[int], window: int = WINDOW) -> dict[str, Any]:
    """What the report prints for one system, from its chain's history."""
    marks = chain.marks
    out: dict[str, Any] = {
        "steps_done": len(marks),
        "closing": chain.closing,
        "reason": chain.reason,
        "runs_in_chain": len(chain.runs),
        "chain_bytes": sum(b for b, _ in chain.runs),
        "chain_events": sum(e for _, e in chain.runs),
        "largest_run_bytes": max((b for b, _ in chain.runs), default=0),
        "at_step": {
            str(step): {
                "chain_bytes": m.chain_bytes,
                "chain_events": m.chain_events,
                "run_bytes": m.run_bytes,
                "run_events": m.run_events,
                "run_index": m.run_index,
                "step_ms": window_ms(marks, step, window),
            }
            for step in marks_at
            if step <= len(marks)
            for m in [marks[step - 1]]
        },
        "window": window,
        # Every step, to draw or re-read: ms since step 1, chain bytes and events, run bytes.
        "steps": [
            [round((m.at - marks[0].at) * 1000, 1), m.chain_bytes, m.chain_events, m.run_bytes]
            for m in marks
        ],
    }
    # The dev server dispatches a queue's first two dozen or so tasks faster than every later
    # one (bench/server_pace.py, bare Temporal): the window after the first is also given.
    times = [m.at * 1000 for m in marks]
    settled, last = per_step(times[window:], window)
    out["step_ms_settled"] = {"first": settled, "last": last, "ratio": ratio(last, settled)}
    for name, values in (
        ("step_ms", times),
        ("bytes_per_step", [float(m.chain_bytes) for m in marks]),
        ("events_per_step", [float(m.chain_events) for m in marks]),
    ):
        first, last = per_step(values, window)
        out[name] = {"first": first, "last": last, "ratio": ratio(last, first)}
    return out


async def measure(
    client: Client,
    system: str,
    worker_env: dict[str, str],
    others: dict[str, Callable[[], list[int]]],
    *,
    pages: int,
    budget_seconds: float,
    history_events: int = 10_000,
    marks_at: Sequence[int] = MARKS,
    profile_raw: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One long run of `system` on a worker process of its own, to its end or the budget;
    with `profile_raw`, py-spy records its worker throughout."""
    queue = harness.new_queue(f"{system}-long")
    workflow_id = f"{queue}-run"
    worker = harness.bench_worker(system, queue, worker_env)
    cut_off = False
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(harness.running(worker))
        if profile_raw is not None:
            await stack.enter_async_context(harness.py_spy(worker.pid, profile_raw))
        sampler = await stack.enter_async_context(harness.Sampler(worker.pid, others))
        handle = await start(client, system, workflow_id, queue, pages, history_events)
        try:
            await asyncio.wait_for(handle.result(), budget_seconds)
        except TimeoutError:
            cut_off = True
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(workflow_id).terminate("long-run budget spent")
        except Exception:  # the history says how it ended
            pass
    assert handle.first_execution_run_id is not None
    chain = await read_chain(
        client, workflow_id, handle.first_execution_run_id, TOOL_ACTIVITY[system]
    )
    out = figures(chain, marks_at)
    steps = max(out["steps_done"], 1)
    out |= {
        "system": system,
        "pages": pages,
        "finished": chain.closing == "completed" and out["steps_done"] >= pages,
        "cut_off_by_budget": cut_off,
        "wall_seconds": sampler.wall,
        "rss_mb_peak": sampler.peak_rss / 1e6 if sampler.peak_rss else None,
        "worker_cpu_ms_per_step": sampler.cpu["worker"] * 1000 / steps,
        "temporal_cpu_ms_per_step": sampler.cpu.get("temporal", 0) * 1000 / steps,
        "profile_raw": str(profile_raw) if profile_raw is not None else None,
    }
    log(
        f"  {system}: {out['steps_done']}/{pages} steps, {out['closing']}"
        f"{' (' + str(out['reason']) + ')' if out['reason'] else ''}; history "
        f"{fmt(out['chain_bytes'] / 1e6, ' MB', 2)} over {out['runs_in_chain']} run(s); "
        f"per step, last ÷ first: time {fmt_ratio(out['step_ms']['ratio'])}, "
        f"bytes {fmt_ratio(out['bytes_per_step']['ratio'])}"
    )
    return out


async def stage(
    client: Client,
    worker_env: dict[str, str],
    others: dict[str, Callable[[], list[int]]],
    *,
    systems: Sequence[str],
    pages: int,
    budget_seconds: float,
    profile_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Each system's long run, one after another; `profile_dir`: py-spy on each worker."""
    out: dict[str, Any] = {
        "pages": pages,
        "page_chars": ours.PAGE_CHARS,
        "systems": [s for s in SYSTEMS if s in systems],
        "marks": [m for m in MARKS if m <= pages] or [pages],
    }
    for system in out["systems"]:
        try:
            out[system] = await measure(
                client,
                system,
                worker_env,
                others,
                pages=pages,
                budget_seconds=budget_seconds,
                marks_at=out["marks"],
                profile_raw=None if profile_dir is None else profile_dir / f"long-{system}.txt",
                log=log,
            )
        except Exception as err:  # one system's failure is reported
            out[system] = {"error": f"{type(err).__name__}: {err}"}
            log(f"  {system}: {out[system]['error']}")
    return out
