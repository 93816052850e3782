"""The lab a chaos scenario runs in: the embedded stack, worker processes, an approver.

Workers are real `worker.py` processes, so a SIGKILL is a real machine loss. A lab's runs
use a model planner that calls one tool of each kind: a read (search_notes), an external
effect with a reconcile hook (create_ticket), and a transactional effect behind a human
approval (send_message), which the lab's approver grants.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowExecutionStatus

from agentledger.client.approver_keys import ApproverKey
from agentledger.core.background import alongside
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.spec import RunSpec
from agentledger.dev.offline_model import Json, Reply, completion, offline_planner
from agentledger.dev.stack import EmbeddedStack, free_port
from agentledger.store.db import open_pool
from agentledger.temporal.client import connect
from bench.harness import WorkerProcess
from tests import client_ops as ops

TASK = "Open a ticket, look up our refund policy and notify ana@example.com about it."
TOOLS = ["search_notes", "create_ticket", "send_message"]

# One plan per fault point, aimed where it hurts most.
POINT_PLANS = [
    "tool.before_run:create_ticket",
    "tool.after_effect:send_message",
    "tool.after_external_effect:create_ticket",
    "model.after_response",
    "mirror.after_write",
    "mirror.in_transaction",
    "receipt.in_write",
    "tool.zombie",
]
ZOMBIE_SECONDS = 8
# Sub-agents' runs (agentledger.workflows.subagents.subagent_run_id), as SQL LIKE matches them.
SUBAGENT_RUNS = "run-~sub.%"

ENDED = {
    WorkflowExecutionStatus.COMPLETED,
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.CANCELED,
    WorkflowExecutionStatus.TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT,
}


def chaos_planner(request: Json) -> Reply:
    """The offline planner, with a ticket opened once the notes are searched."""
    offered = {t["function"]["name"] for t in request.get("tools", []) if t.get("function")}
    called = {
        call["function"]["name"]
        for m in request.get("messages", [])
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    if "create_ticket" in offered and "search_notes" in called and "create_ticket" not in called:
        return completion(
            request,
            tool_calls=[("create_ticket", {"title": "Refund question", "body": TASK})],
        )
    return offline_planner(request)


def chaos_spec(prefix: str, index: int) -> RunSpec:
    return RunSpec(
        task=TASK,
        idempotency_key=f"{prefix}-{index:04d}",
        allowed_tools=TOOLS,
        # Attempts to spare, and short waits between them: the chaos kills many attempts.
        timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.5, "max_attempts": 30},
        failures={"model_attempts_before_fallback": 30, "max_retry_seconds": 4},
    )


@dataclass
class Lab:
    home: Path
    stack: EmbeddedStack = field(init=False)
    settings: AgentLedgerConfig = field(init=False)
    client: Client = field(init=False)
    pool: AsyncConnectionPool = field(init=False)
    workers: list[WorkerProcess] = field(default_factory=list)
    approvals: int = 0

    async def start(self) -> Lab:
        self.stack = EmbeddedStack(
            self.home,
            temporal_port=free_port(),
            ui_port=free_port(),
            ui=False,
            planner=chaos_planner,
        )
        endpoints = await asyncio.to_thread(self.stack.start)
        self.settings = AgentLedgerConfig.load(
            {
                "TEMPORAL_ADDRESS": endpoints["temporal_address"],
                "DATABASE_URL": endpoints["database_url"],
                "OPENAI_BASE_URL": endpoints["openai_base_url"],
            }
        )
        self.client = await connect(self.settings)
        self.pool = await open_pool(self.settings.require_database(), max_size=4)
        return self

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.stop(within=5)
        await self.pool.close()
        await asyncio.to_thread(self.stack.stop)

    def worker(self, queue: str, faults: str = "", **env: str) -> WorkerProcess:
        """A `worker.py` process on `queue`, with `faults` armed; started by the caller."""
        endpoints = self.stack.endpoints
        process = WorkerProcess(
            [
                sys.executable,
                "-m",
                "chaos.faulty_worker",
                "--demo",
                "--identity",
                f"{queue}-{uuid.uuid4().hex[:6]}",
            ],
            {
                "TEMPORAL_ADDRESS": endpoints["temporal_address"],
                "DATABASE_URL": endpoints["database_url"],
                "OPENAI_BASE_URL": endpoints["openai_base_url"],
                "AGENTLEDGER_TASK_QUEUE": queue,
                "AGENTLEDGER_FAULTS": faults,
                "AGENTLEDGER_SEARCH_ATTRIBUTES": "0",
                **env,
            },
        )
        self.workers.append(process)
        return process

    async def start_runs(self, queue: str, prefix: str, count: int, first: int = 0) -> list[str]:
        run_ids = []
        for index in range(first, first + count):
            started = await ops.start_run(self.client, chaos_spec(prefix, index), task_queue=queue)
            run_ids.append(started.run_id)
        return run_ids

    async def open_runs(self, run_ids: list[str]) -> list[str]:
        """The runs Temporal has not closed yet (an unreachable server counts all as open)."""
        open_ = []
        for run_id in run_ids:
            try:
                description = await self.client.get_workflow_handle(run_id).describe()
            except Exception:
                return list(run_ids)
            if description.status not in ENDED:
                open_.append(run_id)
        return open_

    async def wait_ended(self, run_ids: list[str], seconds: float) -> list[str]:
        """Wait until every run ended; returns those still open at the deadline."""
        deadline = asyncio.get_running_loop().time() + seconds
        pending = list(run_ids)
        while True:  # looked at once at least, whatever `seconds`
            pending = await self.open_runs(pending)
            if not pending or asyncio.get_running_loop().time() >= deadline:
                return pending
            await asyncio.sleep(2)

    @contextlib.asynccontextmanager
    async def approver_for(
        self, run_ids: list[str], keys: dict[str, ApproverKey] | None = None
    ) -> AsyncIterator[None]:
        """Grant every approval the runs (and their sub-agents' runs) ask for, whatever else
        is failing meanwhile; signed with its tenant's key in `keys`, if it has one."""
        keys = keys or {}

        async def approve_forever() -> None:
            while True:
                await asyncio.sleep(0.5)
                try:  # the mirror says who waits; during an outage, nobody is approved
                    async with self.pool.connection() as conn:
                        cur = await conn.execute(
                            """SELECT run_id, tenant FROM runs
                               WHERE status = 'waiting_for_approval'
                                 AND (run_id = ANY(%s) OR run_id LIKE %s)""",
                            (run_ids, SUBAGENT_RUNS),
                        )
                        waiting = list(await cur.fetchall())
                except Exception:
                    continue
                for run_id, tenant in waiting:
                    signer = keys.get(tenant)
                    with contextlib.suppress(Exception):
                        # Bounded by its own `wait`: an outer wait_for cancelling the update's
                        # own wait_for left its exception unretrieved (noise in the log).
                        await ops.approve(
                            self.client,
                            run_id,
                            by=signer.signer.name if signer else "chaos",
                            role="approver",
                            wait=10,
                            signer=signer,
                        )
                        self.approvals += 1

        async with alongside(approve_forever()):
            yield
