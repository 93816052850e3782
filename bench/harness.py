"""Shared machinery: worker processes, process metrics, histories, and load at a concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.core.background import alongside

ROOT = Path(__file__).resolve().parent.parent

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is in the bench extra
    psutil = None


# ------------------------------------------------------------------ processes and their cost


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process: psutil if present, else /proc/<pid>/status."""
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes have used so far (0 for those gone)."""
    total = 0.0
    for pid in pids:
        if psutil is not None:
            try:
                times = psutil.Process(pid).cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return total


def postgres_pids(data_dir: Path) -> list[int]:
    """The embedded Postgres's processes (postmaster and backends), found by their data dir."""
    if psutil is None:
        return []
    found = []
    marker = str(data_dir.resolve())
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if proc.info["name"] == "postgres" or "postgres" in " ".join(
                proc.info["cmdline"] or []
            ):
                parent = proc if marker in " ".join(proc.info["cmdline"] or []) else proc.parent()
                if parent is not None and marker in " ".join(parent.cmdline()):
                    found.append(proc.info["pid"])
        except psutil.Error:
            continue
    return found


@dataclass
class Sampler:
    """Samples a worker's RSS while a measurement runs, and the CPU each process group used.

    `others` maps a group name to a function listing its pids now: Postgres starts a backend
    per connection, so the groups are listed again at the end, and a process that appeared
    meanwhile counts from zero.
    """

    worker_pid: int
    others: dict[str, Callable[[], list[int]]] = field(default_factory=dict)
    interval: float = 0.25
    peak_rss: int = 0
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    _sampling: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _cpu0: dict[int, float] = field(default_factory=dict)
    _t0: float = 0.0

    def _groups(self) -> dict[str, list[int]]:
        return {"worker": [self.worker_pid], **{k: f() for k, f in self.others.items()}}

    async def __aenter__(self) -> Sampler:
        self._t0 = time.monotonic()
        self._cpu0 = {pid: cpu_seconds([pid]) for pids in self._groups().values() for pid in pids}

        async def sample() -> None:
            while True:
                self.peak_rss = max(self.peak_rss, rss_bytes(self.worker_pid) or 0)
                await asyncio.sleep(self.interval)

        await self._sampling.enter_async_context(alongside(sample()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._sampling.aclose()
        self.peak_rss = max(self.peak_rss, rss_bytes(self.worker_pid) or 0)
        self.wall = time.monotonic() - self._t0
        self.cpu = {
            name: sum(cpu_seconds([pid]) - self._cpu0.get(pid, 0.0) for pid in pids)
            for name, pids in self._groups().items()
        }


class WorkerProcess:
    """`python -m bench.worker_proc` (or `worker.py`) as a child process we can kill."""

    def __init__(
        self, argv: list[str], env: dict[str, str], *, gc_report: Path | None = None
    ) -> None:
        self.argv = argv
        self.env = env
        self.gc_report = gc_report
        self.proc: asyncio.subprocess.Process | None = None
        self.exited_at: float | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, *, ready_line: str = "", within: float = 60) -> WorkerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=asyncio.subprocess.PIPE,
            # worker.py logs (its `polling` line among them) on stderr; read both as one.
            stderr=asyncio.subprocess.STDOUT,
        )
        if ready_line:
            await asyncio.wait_for(self._wait_for_line(ready_line), within)
        self._watch = asyncio.create_task(self._watch_exit())
        return self

    async def _wait_for_line(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.argv} exited before saying {text!r}")
            if text in line.decode(errors="replace"):
                return

    async def _watch_exit(self) -> None:
        assert self.proc is not None
        drain = asyncio.create_task(self._drain())
        await self.proc.wait()
        self.exited_at = time.time()
        drain.cancel()

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.read(65536):
            pass

    async def wait_exit(self, within: float) -> float | None:
        assert self._watch is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._watch), within)
        return self.exited_at

    async def collector_totals(self, within: float = 5) -> tuple[float, int] | None:
        """(seconds, collections) the worker has spent in garbage collection so far, or None
        for a worker that does not count them (bench.worker_proc's CollectorClock)."""
        if self.gc_report is None or self.proc is None or self.proc.returncode is not None:
            return None
        lines = self._report_lines()
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            now = self._report_lines()
            if len(now) > len(lines):
                seconds, collections = now[-1].split()
                return float(seconds), int(collections)
            await asyncio.sleep(0.02)
        return None

    def _report_lines(self) -> list[str]:
        assert self.gc_report is not None
        if not self.gc_report.exists():
            return []
        return [line for line in self.gc_report.read_text().splitlines() if line.strip()]

    async def stop(self, within: float = 20) -> None:
        if self.gc_report is not None:
            shutil.rmtree(self.gc_report.parent, ignore_errors=True)
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


def bench_worker(kind: str, task_queue: str, env: dict[str, str], *extra: str) -> WorkerProcess:
    report = Path(tempfile.mkdtemp(prefix="agentledger-bench-gc-")) / "gc.txt"
    argv = [sys.executable, "-m", "bench.worker_proc", "--kind", kind, "--task-queue", task_queue]
    return WorkerProcess([*argv, "--gc-report", str(report), *extra], env, gc_report=report)


@contextlib.asynccontextmanager
async def py_spy(pid: int, raw: Path, *, gil: bool = False) -> AsyncIterator[bool]:
    """py-spy records the process (all threads, 100 Hz, raw stacks) into `raw` while the block
    runs; yields whether py-spy is installed. `gil`: only the samples of a thread holding the
    GIL, which is closer to CPU spent: without it, a thread waiting for the GIL after a
    short C call (a socket send, a Rust call) is counted as working there."""
    spy_bin = shutil.which("py-spy") or shutil.which(
        "py-spy", path=str(Path(sys.executable).parent)
    )
    if spy_bin is None:
        yield False
        return
    spy = await asyncio.create_subprocess_exec(
        spy_bin, "record", "--pid", str(pid), "--rate", "100", "--format", "raw",
        "--output", str(raw), "--nonblocking", "--threads", *(["--gil"] if gil else []),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.sleep(1.0)
    try:
        yield True
    finally:
        spy.send_signal(signal.SIGINT)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(spy.wait(), 30)


@contextlib.asynccontextmanager
async def running(worker: WorkerProcess) -> AsyncIterator[WorkerProcess]:
    await worker.start(ready_line="ready")
    try:
        yield worker
    finally:
        await worker.stop()


# ------------------------------------------------------------------ histories


def event_time(event: Any) -> float:
    """When a history event happened, epoch seconds."""
    return float(event.event_time.ToDatetime(tzinfo=UTC).timestamp())


# The marker a local activity leaves in history; its data says when the activity completed
# on the worker, which no event's own time says (the marker is written with the workflow
# task that follows, for every local activity the task ran).
LOCAL_ACTIVITY_MARKER = "core_local_activity"


@dataclass
class ActivityTimes:
    name: str
    scheduled: float
    started: float | None = None
    completed: float | None = None
    attempt: int = 1
    local: bool = False  # a local activity: no task of its own, a marker in history


def local_activity_times(event: Any) -> ActivityTimes | None:
    """A local activity's times from its marker: scheduled and completed as the worker
    recorded them, started when scheduled (it runs in the worker that schedules it, with no
    dispatch); None for any other marker."""
    attrs = event.marker_recorded_event_attributes
    if attrs.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in attrs.details:
        return None
    data = json.loads(attrs.details["data"].payloads[0].data)

    def seconds(stamp: dict[str, int] | None) -> float | None:
        return None if not stamp else stamp["seconds"] + stamp.get("nanos", 0) / 1e9

    completed = seconds(data.get("complete_time"))
    scheduled = seconds(data.get("original_schedule_time")) or completed or event_time(event)
    return ActivityTimes(
        data["activity_type"], scheduled, scheduled, completed, data.get("attempt", 1), local=True
    )


@dataclass
class RunTimes:
    workflow_id: str
    started: float
    closed: float | None
    activities: list[ActivityTimes]
    tasks_completed: list[float]

    def of(self, name: str) -> list[ActivityTimes]:
        return [a for a in self.activities if a.name == name]

    def acceptance_lags(self, name: str) -> list[float]:
        """Seconds from each `name` activity's completion to the workflow task that took it
        (the first to complete after it): when the run has accepted the step. Nothing that
        waits for Temporal's commit of a step, a mirror included, can land sooner."""
        lags = []
        for item in self.of(name):
            after = [t for t in self.tasks_completed if item.completed and t >= item.completed]
            if item.completed is not None and after:
                lags.append(after[0] - item.completed)
        return lags


async def run_times(client: Client, workflow_id: str) -> RunTimes:
    """Event times of one workflow: its start, its close, each activity's life (a local
    activity's from its marker)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    started = closed = None
    by_id: dict[int, ActivityTimes] = {}
    tasks_completed: list[float] = []
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            tasks_completed.append(event_time(event))
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            local = local_activity_times(event)
            if local is not None:
                by_id[event.event_id] = local
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event_time(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            by_id[event.event_id] = ActivityTimes(name, event_time(event))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            item = by_id[attrs.scheduled_event_id]
            item.started, item.attempt = event_time(event), attrs.attempt
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            by_id[
                event.activity_task_completed_event_attributes.scheduled_event_id
            ].completed = event_time(event)
        elif kind in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        ):
            closed = event_time(event)
    assert started is not None, f"{workflow_id} has no start event"
    return RunTimes(workflow_id, started, closed, list(by_id.values()), tasks_completed)


# ------------------------------------------------------------------ load at a concurrency


@dataclass
class LevelResult:
    level: int
    steps_per_run: int
    started: int
    completed: int
    wall_seconds: float
    timed_out: bool
    cut_off: float | None  # epoch seconds the budget ran out, when it did
    workflow_ids: list[str]
    close_times: dict[str, float]
    durations: list[float]  # start to close of each completed run, seconds

    @property
    def runs_per_second(self) -> float | None:
        return self.completed / self.wall_seconds if self.completed and self.wall_seconds else None

    @property
    def steps_per_second(self) -> float | None:
        rate = self.runs_per_second
        return None if rate is None else rate * self.steps_per_run


async def run_level(
    client: Client,
    *,
    level: int,
    steps: int,
    task_queue: str,
    start: Callable[[str], Awaitable[None]],
    budget_seconds: float,
    prefix: str,
) -> LevelResult:
    """Start `level` runs at once, wait (bounded) until they all close, read their close times.

    Wall time runs from the first start request to the last close event, so runs/s counts
    starting them too. Runs still open when the budget is spent are terminated and reported.
    """
    ids = [f"{prefix}-{i:05d}" for i in range(level)]
    gate = asyncio.Semaphore(64)

    async def start_one(workflow_id: str) -> None:
        async with gate:
            await start(workflow_id)

    t0 = time.time()
    await asyncio.gather(*(start_one(i) for i in ids))
    deadline = time.monotonic() + budget_seconds
    query = f'TaskQueue = "{task_queue}" AND ExecutionStatus = "Running"'
    timed_out = False
    cut_off = None
    while True:
        await asyncio.sleep(0.25 if level < 100 else 1.0)
        if (await client.count_workflows(query)).count == 0:
            break
        if time.monotonic() > deadline:
            timed_out = True
            cut_off = time.time()
            break
    if timed_out:
        async for execution in client.list_workflows(query):
            with contextlib.suppress(Exception):
                await client.get_workflow_handle(execution.id).terminate("benchmark budget spent")
    closes: dict[str, float] = {}
    durations: list[float] = []
    async for execution in client.list_workflows(f'TaskQueue = "{task_queue}"'):
        if execution.status == WorkflowExecutionStatus.COMPLETED and execution.close_time:
            closes[execution.id] = execution.close_time.timestamp()
            durations.append((execution.close_time - execution.start_time).total_seconds())
    end = cut_off or (max(closes.values()) if closes else time.time())
    return LevelResult(
        level=level,
        steps_per_run=steps,
        started=len(ids),
        completed=len(closes),
        wall_seconds=end - t0,
        timed_out=timed_out,
        cut_off=cut_off,
        workflow_ids=ids,
        close_times=closes,
        durations=durations,
    )


async def steps_completed(
    client: Client, workflow_ids: list[str], activity: str, until: float, parallel: int = 32
) -> int:
    """How many `activity` tasks these runs completed by `until` (epoch seconds), read from
    their histories: a level cut short counts every step each system did, whole runs or not,
    the same way for every system."""
    gate = asyncio.Semaphore(parallel)

    async def one(workflow_id: str) -> int:
        async with gate:
            times = await run_times(client, workflow_id)
        return sum(
            1
            for a in times.activities
            if a.name == activity and a.completed is not None and a.completed <= until
        )

    return sum(await asyncio.gather(*(one(i) for i in workflow_ids)))


def new_queue(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"
