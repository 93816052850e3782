"""Helpers tests share: run specs with fast timeouts, waiting on live state, reading SQL."""

from __future__ import annotations

import ast
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHandle

from agentledger.core.errors import OperationError
from agentledger.core.results import PendingApproval, RunResult, RunState
from agentledger.core.spec import RunSpec
from agentledger.core.states import RunStatus
from agentledger.core.wire import MirrorBatch, RunEvent, RunSnapshot, StepRecord
from tests import client_ops as ops

T = TypeVar("T")
NOTIFY_TASK = "Look up our refund policy and notify ana@example.com about it."


def mirror_batch(
    run_id: str,
    *,
    fence: int,
    step_seq: int | None = None,
    cost_usd: float = 0.0,
    status: str = "planning",
) -> MirrorBatch:
    """A mirror write as a run sends it at `fence` (its version too): the run row, one
    completed tool step (seq `step_seq`, else the fence) whose output names the fence, and
    one event at the step's seq."""
    now = datetime.now(UTC)
    seq = fence if step_seq is None else step_seq
    return MirrorBatch(
        run=RunSnapshot(
            run_id=run_id,
            version=fence,
            tenant="t",
            user="u",
            task="group commit",
            status=RunStatus(status),
            cost_usd=cost_usd,
            created_at=now,
            updated_at=now,
        ),
        steps=[
            StepRecord(
                step_id=f"{seq:04d}-tool_call",
                seq=seq,
                type="tool_call",
                name="noop",
                status="completed",
                output={"fence": fence},
            )
        ],
        events=[RunEvent(seq=seq, type="step.completed", at=now)],
        fence=fence,
    )


def step_claim(run_id: str, step_id: str, attempt: int) -> dict[str, Any]:
    """`MirrorStore.begin_attempt`'s arguments for a no-op tool step (seq from its id)."""
    return {
        "run_id": run_id,
        "step_id": step_id,
        "seq": int(step_id.split("-")[0]),
        "type": "tool_call",
        "name": "noop",
        "attempt": attempt,
        "worker": "w",
        "lease_seconds": 5,
        "input": {},
    }


def make_spec(task: str = NOTIFY_TASK, **fields: Any) -> RunSpec:
    """A run spec with a fresh idempotency key and timeouts short enough for tests."""
    fields.setdefault("idempotency_key", f"t-{uuid.uuid4().hex[:12]}")
    fields.setdefault("timeouts", {"heartbeat_seconds": 5, "initial_retry_seconds": 0.2})
    return RunSpec(task=task, **fields)


# How long a Temporal dev server may take to start: three test processes start theirs at once
# on two cores, and the SDK's default (5 s) was once not enough.
STARTUP_TIMEOUT = timedelta(seconds=60)


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, seconds: float = 30, what: str = "condition"
) -> T:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        value = await probe()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.1)


async def closed(handle: WorkflowHandle) -> bool:
    """Whether Temporal has closed the workflow: a run's receipt is written before it closes."""
    return (await handle.describe()).close_time is not None


async def wait_status(client: Client, run_id: str, *statuses: str, seconds: float = 30) -> RunState:
    seen: list[str] = []

    async def probe() -> RunState | None:
        state = await answered_status(client, run_id)
        seen.append("no answer" if state is None else state.status.value)
        return state if state is not None and state.status.value in statuses else None

    try:
        return await eventually(probe, seconds=seconds, what=f"{run_id} to reach {statuses}")
    except AssertionError as timed_out:
        # What the run said on the way, so a failure shows where it stood.
        told = [each for at, each in enumerate(seen) if at == 0 or seen[at - 1] != each]
        raise AssertionError(f"{timed_out}; it said, in turn: {', '.join(told)}") from None


async def answered_status(client: Client, run_id: str) -> RunState | None:
    """The run's live state, or None while no worker answers: a worker that just started
    (after a crash or a restart) may not answer the first query in time, as the server
    offers it to the old worker's sticky queue first. For probes of `eventually`."""
    try:
        return await ops.status(client, run_id)
    except OperationError as err:
        if "no worker answered" in str(err):
            return None
        raise


async def wait_pending(client: Client, run_id: str, seconds: float = 30) -> PendingApproval:
    async def probe() -> PendingApproval | None:
        state = await answered_status(client, run_id)
        return state.pending_approval if state is not None else None

    return await eventually(probe, seconds=seconds, what=f"{run_id} to wait for approval")


async def rows(pool: AsyncConnectionPool, sql: str, *params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        names = [c.name for c in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def wait_mirrored_status(
    pool: AsyncConnectionPool, run_id: str, status: str, seconds: float = 30
) -> dict[str, Any]:
    """The run's mirror row once it shows `status`: the mirror's writes trail the live run."""

    async def probe() -> dict[str, Any] | None:
        found = await rows(pool, "SELECT * FROM runs WHERE run_id = %s", run_id)
        return found[0] if found and found[0]["status"] == status else None

    return await eventually(probe, seconds=seconds, what=f"the mirror to show {run_id} {status}")


def scripted(*turns: list[tuple[str, dict[str, Any]]] | str) -> Any:
    """A model that plays `turns` in order: a list of tool calls, or a final answer's text.

    The turn is chosen by how many assistant messages the request already holds, so a retried
    or replayed call gets the same answer.
    """
    from agentledger.dev.offline_model import completion

    def respond(request: dict[str, Any]) -> Any:
        done = sum(1 for m in request["messages"] if m.get("role") == "assistant")
        turn = turns[min(done, len(turns) - 1)]
        if isinstance(turn, str):
            return completion(request, content=turn)
        return completion(request, tool_calls=turn)

    return respond


def parse_python(source: str) -> ast.Module:
    """`ast.parse`, once more after CPython 3.11's race on its AST recursion counter
    (gh-106905: "AST constructor recursion depth mismatch"): a worker thread of the test
    process that compiles a module at the same moment trips it."""
    for attempt in range(5):
        try:
            return ast.parse(source)
        except SystemError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


async def run_result(client: Client, run_id: str) -> RunResult:
    """How the run ended, as `client.runs.result` reads it: a failed run's result rides in its
    failure, a cancelled run's is read from its final state (agentledger/workflows/run_endings.py).
    """
    return await ops.result(client, run_id)
