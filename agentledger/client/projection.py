"""The mirror as a projection of Temporal's history: derive it, compare it, rebuild it.

Replaying a run's histories (every execution of a continue-as-new chain) re-runs the
workflow code against what Temporal accepted. An interceptor notes each mirror write the
workflow made whose activity completed in history (a `mirror.sync`, or the batch a step's
activity carried), and each accepted tool result; folding
those gives the rows the mirror must hold. `compare` says, row by row, what is duplicate,
divergent, lost or orphan; `MirrorStore.rebuild` writes the derived rows back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle

from agentledger.core import constants as names
from agentledger.core.payload_limits import DEFAULT_LIMIT_BYTES, PayloadLimitInterceptor
from agentledger.core.results import Receipt
from agentledger.core.storable import escape_nul
from agentledger.core.wire import (
    MirrorBatch,
    ReceiptChanges,
    RunEvent,
    RunSnapshot,
    StepRecord,
    ToolCallResult,
)
from agentledger.workflows import AgentRunWorkflow

CLOSED_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
}
# Step columns the history decides; the rest (worker, lease, mid-step checkpoint, start
# time) belong to the attempts and are not part of the projection.
STEP_COLUMNS = (
    "seq",
    "type",
    "name",
    "status",
    "output",
    "error",
    "attempt",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "idempotency_key",
    "final",
    "finished_at",
)
# Step activities whose input may carry the run's pending mirror batch.
CARRIERS = {names.ACTIVITY_MODEL_COMPLETE, names.ACTIVITY_TOOL_INVOKE}
RUN_COLUMNS = (
    "version",
    "agent",
    "profile_hash",
    "status",
    "current_step_id",
    "pause_reason",
    "model",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "duplicates_prevented",
    "checkpoint",
    "result",
    "error",
    "finished_at",
)


@dataclass
class Projection:
    """The mirror rows one run's history accounts for."""

    run_id: str
    closed: bool
    run: RunSnapshot | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)
    events: dict[int, RunEvent] = field(default_factory=dict)
    receipt: Receipt | None = None

    def batch(self) -> MirrorBatch:
        assert self.run is not None, "a run with no accepted mirror write has nothing to write"
        return MirrorBatch(
            run=self.run,
            steps=sorted(self.steps.values(), key=lambda s: s.seq),
            events=sorted(self.events.values(), key=lambda e: e.seq),
        )

    def artifact_ids(self) -> set[str]:
        found: set[str] = set()
        for step in self.steps.values():
            _collect_artifacts(step.output, found)
        return found


ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
KINDS = ("duplicate", "divergent", "lost", "orphan", "unwritable")


@dataclass(frozen=True)
class Difference:
    kind: str  # duplicate | divergent | lost | orphan | unwritable
    table: str
    key: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind:9} {self.table}[{self.key}] {self.detail}".rstrip()


# ------------------------------------------------------------------ derive from history


class _Accepted:
    """What the replayed workflow wrote to the mirror, in call order, once accepted."""

    def __init__(self) -> None:
        self.calls = 0
        self.results: list[tuple[int, str, Any, Any]] = []

    def watch(self, activity: str, args: Any, handle: ActivityHandle[Any]) -> None:
        self.calls += 1
        order = self.calls

        def done(task: Any) -> None:
            if not task.cancelled() and task.exception() is None:
                self.results.append((order, activity, args[0] if args else None, task.result()))

        handle.add_done_callback(done)


class _CaptureInterceptor(Interceptor):
    def __init__(self, accepted: _Accepted) -> None:
        self.accepted = accepted

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        accepted = self.accepted

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
                handle = super().start_activity(input)
                accepted.watch(input.activity, input.args, handle)
                return handle

            def start_local_activity(self, input: StartLocalActivityInput) -> ActivityHandle[Any]:
                handle = super().start_local_activity(input)
                accepted.watch(input.activity, input.args, handle)
                return handle

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


async def run_histories(client: Client, run_id: str) -> list[WorkflowHistory]:
    """Every execution of the run, oldest first, following the continue-as-new chain."""
    histories: list[WorkflowHistory] = []
    execution: str | None = None
    while True:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        execution = started.continued_execution_run_id
        if not execution:
            return list(reversed(histories))


async def project(
    client: Client,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
    histories: list[WorkflowHistory] | None = None,
) -> Projection:
    """The mirror rows for `run_id`, derived by replaying its histories (fetched now, or
    as given: a snapshot taken earlier).

    The replay has the workers' payload guard (at their `payload_limit`), so a write the
    guard refused is not mistaken for one that was made.
    """
    histories = histories or await run_histories(client, run_id)
    # The run's input read first: a payload sealed by a codec this client lacks fails here,
    # named (agentledger.temporal.user_codec), not as a replay's failed workflow task.
    started = histories[0].events[0].workflow_execution_started_event_attributes
    await client.data_converter.decode(list(started.input.payloads))
    accepted = _Accepted()
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=client.data_converter,
        interceptors=[
            PayloadLimitInterceptor(client.data_converter, payload_limit),
            _CaptureInterceptor(accepted),
        ],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    for history in histories:
        await replayer.replay_workflow(history)
    projection = Projection(
        run_id=run_id, closed=histories[-1].events[-1].event_type in CLOSED_EVENTS
    )
    tool_results: dict[str, ToolCallResult] = {}
    for _, activity, arg, result in sorted(accepted.results, key=lambda r: r[0]):
        if activity in CARRIERS and arg.mirror is not None:
            _fold(projection, arg.mirror)  # applied with the step's claim, before its work
        if activity == names.ACTIVITY_MIRROR_SYNC:
            _fold(projection, arg)
        elif activity == names.ACTIVITY_TOOL_INVOKE:
            tool_results[arg.step_id] = result
        elif activity == names.ACTIVITY_RECEIPT_RECORD:
            projection.receipt = result
        elif activity == names.ACTIVITY_MIRROR_FINISH:
            _fold(projection, arg.batch)
            # Runs from before echo the stored receipt whole; later ones what it changed.
            if isinstance(result, ReceiptChanges):
                result = result.applied_to(arg.receipt)
            projection.receipt = result
    for step_id, step in projection.steps.items():
        # A tool step's output is written by its accepted attempt, and that attempt's
        # result is in history: the two must agree.
        tool_result = tool_results.get(step_id)
        if step.output is None and tool_result is not None and tool_result.ok:
            projection.steps[step_id] = step.model_copy(update={"output": tool_result.output})
    return projection


def _fold(projection: Projection, batch: MirrorBatch) -> None:
    if projection.run is None or batch.run.version > projection.run.version:
        projection.run = batch.run
    for step in batch.steps:
        previous = projection.steps.get(step.step_id)
        if previous is not None:
            # As the upsert does: the input is the first write's, a missing output is kept.
            step = step.model_copy(
                update={
                    "input": previous.input,
                    "output": previous.output if step.output is None else step.output,
                }
            )
        projection.steps[step.step_id] = step
    for event in batch.events:
        projection.events.setdefault(event.seq, event)


def _collect_artifacts(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("artifact")
        if isinstance(ref, dict) and isinstance(ref.get("artifact_id"), str):
            found.add(ref["artifact_id"])
        for item in value.values():
            _collect_artifacts(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect_artifacts(item, found)


# ------------------------------------------------------------------ compare with the mirror


@dataclass
class MirrorRows:
    run: dict[str, Any] | None
    steps: dict[str, dict[str, Any]]
    events: list[dict[str, Any]]
    receipt: dict[str, Any] | None
    artifact_ids: set[str]
    failures: list[dict[str, Any]] = field(default_factory=list)


async def read_mirror(pool: AsyncConnectionPool, run_id: str, artifact_ids: set[str]) -> MirrorRows:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT * FROM runs WHERE run_id = %s", (run_id,))
        run = await cur.fetchone()
        await cur.execute("SELECT * FROM steps WHERE run_id = %s", (run_id,))
        steps = {row["step_id"]: row for row in await cur.fetchall()}
        await cur.execute("SELECT * FROM events WHERE run_id = %s ORDER BY seq", (run_id,))
        events = list(await cur.fetchall())
        await cur.execute("SELECT receipt FROM receipts WHERE run_id = %s", (run_id,))
        receipt = await cur.fetchone()
        await cur.execute(
            "SELECT artifact_id FROM artifacts WHERE artifact_id = ANY(%s)", (list(artifact_ids),)
        )
        present = {row["artifact_id"] for row in await cur.fetchall()}
        await cur.execute(
            "SELECT target, error FROM mirror_failures WHERE run_id = %s ORDER BY fence, target",
            (run_id,),
        )
        failures = list(await cur.fetchall())
    return MirrorRows(
        run=run,
        steps=steps,
        events=events,
        receipt=receipt["receipt"] if receipt else None,
        artifact_ids=present,
        failures=failures,
    )


def _plain(value: Any) -> Any:
    """One comparable form for a value from pydantic or from Postgres.

    Times compare as present or absent only. They come from `workflow.now()`, the start of
    the workflow task the code ran in, and a replay can run a piece of code in another task
    than the original did (a task that failed or was cut short, around a local activity),
    so the same row may carry a time a few milliseconds apart.
    """
    if isinstance(value, datetime) or (isinstance(value, str) and ISO_TIME.fullmatch(value)):
        return "<time>"
    if isinstance(value, str):
        return escape_nul(value)  # as every pooled connection writes it
    if isinstance(value, Decimal):
        return round(float(value), 6)
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {escape_nul(key): _plain(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _diverging(expected: dict[str, Any], actual: dict[str, Any], columns: tuple[str, ...]) -> str:
    diffs = [
        f"{c}: history {expected[c]!r}, mirror {actual.get(c)!r}"
        for c in columns
        if _plain(expected[c]) != _plain(actual.get(c))
    ]
    return "; ".join(diffs)


def compare(projection: Projection, mirror: MirrorRows) -> list[Difference]:
    """Every row where the mirror and the history part ways; empty means they agree."""
    found: list[Difference] = []
    run_id = projection.run_id
    if projection.run is None:
        if mirror.run is not None:
            found.append(Difference("orphan", "runs", run_id, "history accepted no mirror write"))
    elif mirror.run is None:
        found.append(Difference("lost", "runs", run_id))
    else:
        expected = projection.run.model_dump()
        expected["status"] = projection.run.status.value
        if detail := _diverging(expected, mirror.run, RUN_COLUMNS):
            found.append(Difference("divergent", "runs", run_id, detail))

    for step_id, step in projection.steps.items():
        row = mirror.steps.get(step_id)
        if row is None:
            found.append(Difference("lost", "steps", step_id))
            continue
        expected = step.model_dump()
        columns = STEP_COLUMNS + (("input",) if step.input else ())
        if detail := _diverging(expected, row, columns):
            found.append(Difference("divergent", "steps", step_id, detail))
    for step_id, row in mirror.steps.items():
        if step_id not in projection.steps:
            found.append(
                Difference("orphan", "steps", step_id, f"status {row['status']}, not accepted")
            )

    seen: dict[tuple[str, str | None, str], int] = {}
    for row in mirror.events:
        event = projection.events.get(row["seq"])
        key = str(row["seq"])
        if event is None:
            found.append(Difference("orphan", "events", key, row["type"]))
            continue
        shape = (row["type"], row["step_id"], json.dumps(_plain(row["data"]), sort_keys=True))
        seen[shape] = seen.get(shape, 0) + 1
        expected = event.model_dump()
        actual = {**row, "at": row["created_at"]}
        if detail := _diverging(expected, actual, ("type", "step_id", "data", "at")):
            found.append(Difference("divergent", "events", key, detail))
    mirrored_seqs = {row["seq"] for row in mirror.events}
    for seq in sorted(set(projection.events) - mirrored_seqs):
        found.append(Difference("lost", "events", str(seq), projection.events[seq].type))
    expected_shapes: dict[tuple[str, str | None, str], int] = {}
    for event in projection.events.values():
        shape = (event.type, event.step_id, json.dumps(_plain(event.data), sort_keys=True))
        expected_shapes[shape] = expected_shapes.get(shape, 0) + 1
    for shape, count in seen.items():
        if count > expected_shapes.get(shape, 0) > 0:
            found.append(Difference("duplicate", "events", shape[0], f"{count} rows"))

    if projection.receipt is not None:
        expected_receipt = projection.receipt.model_dump(mode="json")
        if mirror.receipt is None:
            found.append(Difference("lost", "receipts", run_id))
        elif _plain(expected_receipt) != _plain(mirror.receipt):
            keys = sorted(
                k
                for k in expected_receipt
                if _plain(expected_receipt[k]) != _plain(mirror.receipt.get(k))
            )
            found.append(Difference("divergent", "receipts", run_id, f"fields {keys}"))
    elif mirror.receipt is not None:
        found.append(Difference("orphan", "receipts", run_id, "history accepted no receipt"))

    for artifact_id in sorted(projection.artifact_ids() - mirror.artifact_ids):
        found.append(Difference("lost", "artifacts", artifact_id))
    for failure in mirror.failures:  # Postgres refused these rows' data; no retry can help
        table, _, key = str(failure["target"]).partition("[")
        found.append(Difference("unwritable", table, key.rstrip("]") or run_id, failure["error"]))
    return found


async def check(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
) -> list[Difference]:
    projection = await project(client, run_id, payload_limit=payload_limit)
    mirror = await read_mirror(pool, run_id, projection.artifact_ids())
    found = compare(projection, mirror)
    if any(d.kind == "orphan" for d in found):
        # An open run may have gone on between the two reads: its mirror then holds rows its
        # history, read first, did not. The mirror never runs ahead of Temporal, so history
        # read again holds every row the mirror could have held; what is still an orphan is one.
        read = projection.artifact_ids()  # the artifacts the mirror read looked for
        projection = await project(client, run_id, payload_limit=payload_limit)
        found = [
            d
            for d in compare(projection, mirror)
            if not (d.kind == "lost" and d.table == "artifacts" and d.key not in read)
        ]
    return found
