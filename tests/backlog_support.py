"""Helpers the backlog tests share: tasks with fast timeouts, reading the backlog mirror."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.core.backlog_models import TaskItem, backlog_id
from agentledger.core.spec import RunSpec
from tests.support import eventually, rows

QUICK = "Summarize the order policy."
FAST_TIMEOUTS = {"heartbeat_seconds": 2, "initial_retry_seconds": 0.2}


def new_agent(prefix: str = "agent") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def item(key: str, task: str = QUICK, **spec: Any) -> TaskItem:
    """A task whose run the offline planner finishes in a few hundred milliseconds."""
    spec.setdefault("allowed_tools", ["search_notes"])
    spec.setdefault("timeouts", FAST_TIMEOUTS)
    max_attempts = spec.pop("max_attempts", None)
    return TaskItem(
        title=f"task {key}",
        idempotency_key=key,
        spec=RunSpec(task=f"{task} ({key})", **spec),
        max_attempts=max_attempts,
    )


async def tasks(pool: AsyncConnectionPool, agent: str) -> list[dict[str, Any]]:
    return await rows(
        pool,
        """SELECT ordinal, task_key, state, attempts, launches, run_id, last_error
           FROM backlog_tasks WHERE agent = %s ORDER BY ordinal""",
        agent,
    )


async def runs(pool: AsyncConnectionPool, agent: str) -> list[dict[str, Any]]:
    """The agent's task runs, in the order they started."""
    return await rows(
        pool,
        """SELECT run_id, status, created_at, finished_at FROM runs
           WHERE run_id LIKE %s ORDER BY created_at""",
        f"run-{agent}.%",
    )


async def step_attempts(pool: AsyncConnectionPool, agent: str) -> list[dict[str, Any]]:
    """Each step of the agent's task runs: its accepted attempt (`accepted`), its last
    (`last`), and the workers of its attempts, run by run, in step order."""
    return await rows(
        pool,
        """SELECT s.run_id, s.name, s.type, s.status, s.final, s.attempt AS accepted,
                  max(a.attempt) AS last, array_agg(a.worker ORDER BY a.attempt) AS workers
           FROM steps s JOIN step_attempts a USING (run_id, step_id)
           WHERE s.run_id LIKE %s GROUP BY s.run_id, s.step_id ORDER BY s.run_id, s.seq""",
        f"run-{agent}.%",
    )


async def wait_states(
    pool: AsyncConnectionPool, agent: str, want: dict[str, str], seconds: float = 30
) -> list[dict[str, Any]]:
    """Wait until the mirror shows each named task in the named state."""

    async def probe() -> list[dict[str, Any]] | None:
        found = await tasks(pool, agent)
        states = {t["task_key"]: t["state"] for t in found}
        return found if all(states.get(k) == s for k, s in want.items()) else None

    return await eventually(probe, seconds=seconds, what=f"{agent} tasks to reach {want}")


async def wait_all_done(
    pool: AsyncConnectionPool, agent: str, count: int, seconds: float = 60
) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        found = await tasks(pool, agent)
        return found if len(found) == count and all(t["state"] == "done" for t in found) else None

    return await eventually(probe, seconds=seconds, what=f"all {count} tasks of {agent} done")


async def end_backlog(client: Client, agent: str) -> None:
    """Tests share one Temporal server: leave no backlog workflow behind."""
    try:
        await client.get_workflow_handle(backlog_id(agent)).terminate("test cleanup")
    except RPCError:
        pass


def assert_ran_in_order(started: list[dict[str, Any]], keys: list[str]) -> None:
    """One run per task, in ordinal order, each starting after the previous one ended."""
    assert [r["run_id"].split(".")[1] for r in started] == keys
    for before, after in itertools.pairwise(started):
        assert before["finished_at"] is not None
        assert after["created_at"] >= before["finished_at"], (before, after)
