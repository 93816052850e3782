"""Three tenants through every way in, under random operations, on the real stack.

Hypothesis drives tenants through the CLI (in process, with AGENTLEDGER_TENANT set), the Python
`RunClient`, forks, backlog enqueues (whose runs the backlog starts), a deployment's own
workflow running an agent (`run_agent`), a capped tenant's starts and sessions (whose owners
take turns, each second one compacting it: a summary and a continue-as-new), and
has each tenant try every run it has heard of, its own or not (`say`, `chat` and `end`
included, on sessions and other runs alike). Tenant A has a cap of one, a weight of 2 and
a keyed approver; B has nothing; C a weight of 3 and priorities 2 to 5 only (a start at 1 is
refused on every path). Tenants also try the operators' acts (deploy, deploy check, status
and patches, migrate: refused) and prune (their own finished runs alone). After each step
and each sequence:
- no operation of one tenant returned or changed another's run (a refused command left no
  signal, update or cancel request in any generation of the run's history: the signals
  there are the engine's and the owner's own messages);
- every run, whatever path started it, is its starter's tenant's, carries that tenant's
  approvers and weight, and (A) waits behind its cap, and records its agent alike in its
  input, its state, the mirror's row and the receipt: a profile's name or `(free-form)`;
- the capped tenant never has more than one run past `queued`, its backlogs' and its own
  workflows' runs included;
- a refusal for another tenant's run reads exactly as one for a missing run, and another
  tenant's step (`client.runs.step_record`, what an AG-UI stream reads) as an unseen one;
- each tenant's approvals inbox (`GET /v1/approvals` with its key) lists its own runs alone,
  and its key signs in as its own tenant (`GET /v1/me`); its standing approvals list its
  own alone, and another tenant's revoke of one, or a grant scoped to another tenant's
  run, reads exactly as one of a missing rule or run;
- an AG-UI thread is its tenant's run (the same thread name of another tenant's is another
  run), and a resume on another tenant's thread reads exactly as one on a missing thread;
- an A2A task (the `a2a-sdk`'s client) and an MCP tool call (the `mcp` client, as a task of
  the Tasks extension; every sequence has both) start their tenant's run, a message or a
  call naming a tenant is refused and starts nothing, and every A2A and MCP method on
  another tenant's run (get, cancel, a decision, a subscription, push configs; tasks/get,
  tasks/update, tasks/cancel, its receipt and events) answers exactly as on a missing run.
- a schedule's fire (`POST /v1/schedules`, then `/trigger`) and a signed delivery to a
  hook (`POST /v1/hooks/TENANT.NAME`; every sequence has both) start their tenant's run,
  under its policy as every run's; another tenant's schedule reads, on every schedule
  route, exactly as one that is not there, and a delivery signed with one tenant's secret
  to another's hook is refused exactly as one to a missing hook, and starts nothing.
Each tenant's parents also delegate to a sub-agent whose message waits for approval (issue
35): its child's run carries the tenant's approvers and weight (an unsigned "mallory" cannot
decide A's), runs in its parent's slot, and a decision on it, by its tenant's approver, a
forger or another tenant, answers exactly what the run recorded (or is refused as for a
missing run).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import mcp_types
import openai
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from mcp.shared.exceptions import MCPError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import agentledger.demo
from activities import for_worker
from agentledger import RunClient
from agentledger.cli import main as cli_main
from agentledger.client import approver_keys
from agentledger.core.admission_models import TenantLimits
from agentledger.core.backlog_models import TaskItem
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import (
    FREE_FORM_AGENT,
    SIGNAL_CHILD_APPROVAL,
    SIGNAL_RUN_ADMIT,
    SIGNAL_SAY,
)
from agentledger.core.errors import OperationError, OperationRefused
from agentledger.core.http_config import HttpConfig
from agentledger.core.listings import BacklogListing
from agentledger.core.spec import RunSpec
from agentledger.core.webhook_signatures import sign
from agentledger.core.wire import SayInput
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.http.server import bind, serve, url_of
from agentledger.profiles import Agent
from agentledger.store import tool_sets
from agentledger.store.approver_store import ApproverStore
from agentledger.store.db import install_tool_schema, open_pool
from agentledger.store.tenant_store import TenantStore
from agentledger.worker.worker_factory import AgentWorkers, WorkerDeps, build_worker
from agentledger.workflows.child_runs import child_run_id
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests import client_ops as steering_ops
from tests.mcp_support import (
    CancelTask,
    DetailedTask,
    GetTask,
    TaskParams,
    Tasks,
    TaskUpdateParams,
    UpdateTask,
    mcp_client,
)
from tests.support import NOTIFY_TASK, eventually, rows
from tests.test_agui import AGENT
from tests.test_agui import run_input as agui_input
from workflows import WORKFLOWS, RefundRequest, RefundReviewWorkflow

T = TypeVar("T")
WAIT = 15.0
ENDED = ("completed", "failed", "cancelled")
# Signals a run takes that are not a person's command (a child's approval notice, the
# streamed text of its model's answer, sent by its own activity).
ENGINE_SIGNALS = {SIGNAL_RUN_ADMIT, SIGNAL_CHILD_APPROVAL, "__temporal_workflow_stream_publish"}
# A parent that delegates the notify task to its sub-agent (the offline planner makes the
# call its task spells out), whose message then waits for approval.
HELPER = Agent(name="helper", instructions="You help.", tools=["search_notes", "send_message"])
LEAD = Agent(name="lead", instructions="You lead.", subagents=["helper"])
DELEGATE_TASK = f"call agent__helper {json.dumps({'task': NOTIFY_TASK})}"
deciders = st.sampled_from(["approver", "forger", "another tenant"])


@dataclass
class Run:
    run_id: str
    tenant: str
    path: str
    said: set[str] = field(default_factory=set)  # its owner's messages (a session's turns)


# A session's spec: it waits for the next message after each answer, and compacts (a summary
# call, continue-as-new) every second turn.
SESSION = {"idle_timeout": 600, "compact_after_turns": 2, "keep_turns": 1}
SESSION_TASK = "Tell me about refunds."
# The agent a run's mirror row records, and its receipt's (once it has one).
AGENT_SQL = """SELECT r.agent, c.receipt->>'agent' AS receipt_agent FROM runs r
LEFT JOIN receipts c USING (run_id) WHERE r.run_id = %s"""


class Stack:
    """A client, pool, model server and worker on a loop of their own (Hypothesis runs rules
    synchronously); the CLI runs in the calling thread, in process."""

    def __init__(self, address: str, database_url: str, converter: Any, tmp: str) -> None:
        self.address, self.database_url, self.converter = address, database_url, converter
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.model = OfflineModelServer()
        self.model.__enter__()
        self.task_queue = f"door-{uuid.uuid4().hex[:8]}"
        self.config_dir = tmp
        self.refunds = Path(tmp) / "refunds.jsonl"
        self.settings = AgentLedgerConfig.load({}).model_copy(
            update={
                "temporal_address": address,
                "database_url": database_url,
                "openai_base_url": self.model.base_url,
                "task_queue": self.task_queue,
            }
        )
        self.call(self._open())

    def call(self, work: Coroutine[Any, Any, T], seconds: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(seconds)

    async def _open(self) -> None:
        self.client = await Client.connect(self.address, data_converter=self.converter)
        self.pool = await open_pool(self.database_url, max_size=10)
        registry = agentledger.demo.registry
        await install_tool_schema(self.pool, registry.schema())
        # The worker's tools, as a worker process records them: an AG-UI thread's run (a
        # profile's) names tools, and is started only on a queue whose tools are known.
        await tool_sets.join(self.pool, self.task_queue, WORKER_NAME, registry.names())
        model = openai.AsyncOpenAI(base_url=self.model.base_url, api_key="x", max_retries=0)
        deps = WorkerDeps(pool=self.pool, model_client=model, registry=registry)
        self.workers: AgentWorkers = build_worker(
            self.client,
            self.settings,
            deps,
            workflows=WORKFLOWS,
            activities=for_worker(self.refunds),
        )
        await self.workers.__aenter__()
        # The HTTP door (`agentledger serve`), on a real socket, over an operator's RunClient.
        sock = bind("127.0.0.1", 0)
        self.door_url = url_of(sock)
        self.door_stop = asyncio.Event()
        self.door_runs = RunClient.lazy(self.settings)
        # Hostile deliveries (a hook's 401s) count against the one test address: no lockout.
        limits = HttpConfig().model_copy(
            update={"requests_per_second": 10_000.0, "auth_failures": 10_000}
        )
        self.door = asyncio.create_task(
            serve(self.door_runs, limits, ready=lambda url: None, sock=sock, stop=self.door_stop)
        )
        self.http = httpx.Client(base_url=self.door_url, timeout=60)

    def runs_for(self, tenant: str | None) -> RunClient:
        return RunClient(self.client, self.settings.model_copy(update={"tenant": tenant}))

    def cli(self, tenant: str, *argv: str) -> tuple[int, str, str]:
        """`agentledger ARGV` with AGENTLEDGER_TENANT=`tenant`, in this process."""
        env = {
            "TEMPORAL_ADDRESS": self.address,
            "DATABASE_URL": self.database_url,
            "OPENAI_BASE_URL": self.model.base_url,
            "AGENTLEDGER_TASK_QUEUE": self.task_queue,
            "AGENTLEDGER_TENANT": tenant,
            "AGENTLEDGER_CONFIG_DIR": self.config_dir,
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli_main.main(list(argv))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return code, out.getvalue(), err.getvalue()

    async def _close(self) -> None:
        self.http.close()
        self.door_stop.set()
        await self.door
        await self.door_runs.close()
        await self.workers.__aexit__(None, None, None)
        await tool_sets.leave(self.pool, self.task_queue, WORKER_NAME)
        await self.pool.close()

    def close(self) -> None:
        try:
            self.call(self._close())
        finally:
            self.model.__exit__(None, None, None)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


STACK: Stack | None = None
keys = st.sampled_from(["k1", "k2", "k3"])
who = st.sampled_from([0, 1, 2])
reads = st.sampled_from(
    [
        "status",
        "receipt",
        "watch",
        "step",
        "pause",
        "cancel",
        "approve",
        "fork",
        "say",
        "chat",
        "end",
    ]
)
# The HTTP door's run routes, each with a body it takes.
http_routes = st.sampled_from(
    [
        ("GET", "", None),
        ("GET", "/receipt", None),
        ("GET", "/steps", None),
        ("GET", "/events", None),
        ("POST", "/pause", {}),
        ("POST", "/cancel", {}),
        ("POST", "/approve", {"role": "approver"}),
        ("POST", "/say", {"text": "from another tenant"}),
        ("POST", "/end", {}),
        ("POST", "/fork", {"from_step": 1}),
    ]
)
AGUI_PATH = f"/v1/agents/{AGENT}/agui"
# A schedule's routes (docs/triggers.md), as another tenant tries them.
SCHEDULE_ROUTES = [
    ("GET", ""),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("POST", "/trigger"),
    ("POST", "/delete"),
]
WORKER_NAME = "door-worker"
# What another tenant tries on a run over A2A and over MCP.
a2a_methods = st.sampled_from(["get", "cancel", "decide", "subscribe", "push configs"])
mcp_methods = st.sampled_from(["tasks/get", "tasks/update", "tasks/cancel", "receipt", "events"])
APPROVE = {"action": "accept", "content": {"decision": "approve"}}
APPROVE_REPLY = {"decision": "approve"}


@asynccontextmanager
async def a2a_agent(url: str, key: str, *, streaming: bool = False) -> AsyncIterator[Any]:
    """The `a2a-sdk`'s client for the agent, with the key (its card read with it)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        yield await create_client(f"{url}/a2a/{AGENT}", client_config=config)


# Acts that span tenants: a tenant's is refused, as `tenants set` is.
operator_acts = st.sampled_from(
    [
        ("deploy", "check"),
        ("deploy", "status"),
        ("deploy", "patches"),
        ("deploy", "v9", "--skip-check"),
        ("migrate",),
    ]
)


class Tenants(RuleBasedStateMachine):
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        assert STACK is not None
        self.stack = STACK
        mark = uuid.uuid4().hex[:6]
        self.tenants = [f"a-{mark}", f"b-{mark}", f"c-{mark}"]
        self.weights = {self.tenants[0]: 2.0, self.tenants[1]: 1.0, self.tenants[2]: 3.0}
        self.known: list[Run] = []
        self.signers: dict[str, set[str]] = {t: set() for t in self.tenants}
        # One agent's backlog every tenant enqueues into, beside each tenant's own; a key
        # is the task of the tenant that enqueued it first (a later enqueue ignores it).
        self.shared = f"desk-shared-{mark}"
        self.owners: dict[tuple[str, str], str] = {}
        self.parents: list[str] = []  # the deployment's own workflows, ended at teardown
        self.children: list[Run] = []  # sub-agents' runs (in their parents' slots)
        self.schedules: list[tuple[str, str]] = []  # (tenant, name), deleted at the end
        self.hooks: dict[str, str] = {}  # each tenant's hook's secret
        # Each tenant's key for the HTTP door, made first: the initializers' order is random.
        operator = self.stack.runs_for(None)
        self.keys = {t: self.call(operator.keys.create(t, "admin")).key for t in self.tenants}
        self.standing: dict[str, set[str]] = {t: set() for t in self.tenants}  # rule ids

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return self.stack.call(work)

    @initialize(decider=deciders, approve=st.booleans())
    def policies(self, decider: str, approve: bool) -> None:
        """The tenants' policies; then A (whose slot is free only now) delegates once."""
        a, _, c = self.tenants
        store = TenantStore(self.stack.pool)
        self.call(store.save(TenantLimits(tenant=a, max_in_flight=1, weight=2)))
        self.call(store.save(TenantLimits(tenant=c, weight=3, allowed_priorities=[2, 3, 4, 5])))
        folder = os.path.join(self.stack.config_dir, a)
        self.ana = approver_keys.create(Path(folder), "ana", "approver", a)
        self.call(ApproverStore(self.stack.pool).add(self.ana.signer))
        self.signers[a] = {self.ana.signer.key_id}
        self.delegate_to_a_subagent(0, decider, approve)

    def learn(self, run_id: str, tenant: str, path: str) -> Run:
        found = next((r for r in self.known if r.run_id == run_id), None)
        if found is not None:
            assert found.tenant == tenant, f"{path} of {tenant} returned {found}"
            return found
        run = Run(run_id, tenant, path)
        self.known.append(run)
        return run

    # ------------------------------------------------------------ the ways in

    @rule(target=runs, t=who, key=keys)
    def start_with_the_cli(self, t: int, key: str) -> Run:
        tenant = self.tenants[t]
        code, out, err = self.stack.cli(
            tenant, "start", "--task", NOTIFY_TASK, "--idempotency-key", key, "--json"
        )
        assert code == 0, err
        return self.learn(json.loads(out)["run_id"], tenant, "cli")

    @rule(target=runs, t=who, key=keys)
    def start_with_the_python_client(self, t: int, key: str) -> Run:
        tenant = self.tenants[t]
        runs = self.stack.runs_for(tenant)
        try:
            run_id = self.call(runs.runs.start(NOTIFY_TASK, idempotency_key=key)).run_id
        finally:
            self.call(runs.close())
        return self.learn(run_id, tenant, "client")

    @rule(target=runs, t=who, run=runs)
    def fork(self, t: int, run: Run) -> Run:
        tenant = self.tenants[t]
        runs = self.stack.runs_for(tenant)
        try:
            fork_id = self.call(runs.runs.fork(run.run_id, from_step=1)).run_id
        except OperationError as err:
            if run.tenant != tenant:
                self.same_as_missing(tenant, "fork", run, err)
            else:
                assert str(err) != str(ops.no_run(run.run_id)), "its own run is there"
            return run
        finally:
            self.call(runs.close())
        assert run.tenant == tenant, f"{tenant} forked {run}"
        return self.learn(fork_id, tenant, "fork")

    @rule(target=runs, t=who)
    def start_a_session(self, t: int) -> Run:
        tenant = self.tenants[t]
        runs = self.stack.runs_for(tenant)
        try:
            run_id = self.call(
                runs.runs.start(
                    SESSION_TASK,
                    idempotency_key=f"session-{uuid.uuid4().hex[:6]}",
                    allowed_tools=[],
                    session=SESSION,
                )
            ).run_id
        finally:
            self.call(runs.close())
        return self.learn(run_id, tenant, "session")

    @initialize(target=runs)
    def a_session_compacted_once(self) -> Run:
        """Every sequence has a session that compacted (its second turn); the other tenants'
        messages, chat turns and ends of it are refused as for a missing run."""
        run = self.start_a_session(1)
        self.take_a_turn(run)
        for other in (0, 2):
            for action in ("say", "chat", "end"):
                self.act(other, run, action)
        return run

    @rule(run=runs)
    def take_a_turn(self, run: Run) -> None:
        """The owner says the next message to its session (`say`) and waits for the turn's
        answer; every second turn compacts the session. A session of the capped tenant may
        wait behind its cap: the message waits in it too."""
        if run.path != "session":
            return
        client, pool = self.stack.client, self.stack.pool

        async def turn() -> None:
            before = await ops.status(client, run.run_id, tenant=run.tenant, wait=WAIT)
            said = await steering_ops.say(
                client, run.run_id, "And exchanges?", by="owner", tenant=run.tenant,
                mirror=pool, wait=WAIT,
            )  # fmt: skip
            run.said.add(said.message_id)
            if before.status.value == "queued":
                return

            async def answered() -> bool:
                state = await ops.status(client, run.run_id, tenant=run.tenant, wait=WAIT)
                last = state.turns[-1] if state.turns else None
                return (
                    last is not None
                    and said.message_id in last.message_ids
                    and state.status.value == "waiting_for_message"
                )

            await eventually(answered, seconds=60, what=f"a turn of {run.run_id}")

        self.call(turn())

    @initialize()
    def a_backlog_of_two_tenants(self) -> None:
        """Tenants B and C each have a task in the shared backlog from the start."""
        for t in (1, 2):
            self.enqueue_a_backlog_task(t, f"seed-{t}", shared=True)

    @rule(t=who, key=keys, shared=st.booleans())
    def enqueue_a_backlog_task(self, t: int, key: str, shared: bool) -> None:
        tenant = self.tenants[t]
        plan = os.path.join(self.stack.config_dir, f"plan-{uuid.uuid4().hex[:6]}.yaml")
        with open(plan, "w") as out:
            out.write(f"- title: t\n  idempotency_key: {key}\n  spec: {{task: {NOTIFY_TASK!r}}}\n")
        agent = self.shared if shared else f"desk-{tenant}"
        code, _, err = self.stack.cli(tenant, "backlog", "enqueue", "--agent", agent, plan)
        assert code == 0, err  # a capped tenant's runs wait in its queue
        self.owners.setdefault((agent, key), tenant)

    @rule(target=runs, t=who, key=keys)
    def run_an_agent_from_an_own_workflow(self, t: int, key: str) -> Run:
        """A deployment's workflow runs the tenant's agent as its child (`run_agent`)."""
        tenant = self.tenants[t]
        parent = f"refund-{tenant}-{key}-{uuid.uuid4().hex[:6]}"
        request = RefundRequest(
            request_id=key,
            customer="ana@example.com",
            amount_usd=1.0,
            agent=RunSpec(task=NOTIFY_TASK, tenant=tenant),
        )
        self.parents.append(parent)
        self.call(
            self.stack.client.start_workflow(
                RefundReviewWorkflow.run, request, id=parent, task_queue=self.stack.task_queue
            )
        )
        run_id = child_run_id(parent, key)

        async def started() -> bool:
            try:
                await ops.status(self.stack.client, run_id, wait=WAIT)
            except OperationError:
                return False
            return True

        self.call(eventually(started, seconds=60, what=f"{run_id} to start"))
        return self.learn(run_id, tenant, "run_agent")

    @rule(t=who, decider=deciders, approve=st.booleans())
    def delegate_to_a_subagent(self, t: int, decider: str, approve: bool) -> None:
        """A parent of tenant `t` delegates to a sub-agent; once the child's message waits
        for approval, `decider` approves or rejects it. A's parent queued behind its cap
        delegates later, unobserved."""
        tenant = self.tenants[t]
        runs = self.stack.runs_for(tenant)
        try:
            spec = LEAD.spec(DELEGATE_TASK, agents={"helper": HELPER}, tenant=tenant)
            parent = self.call(runs.runs.start(spec=spec)).run_id
        finally:
            self.call(runs.close())
        self.learn(parent, tenant, "sub-agent's parent")

        async def waiting() -> str | None:
            state = await ops.status(self.stack.client, parent, wait=WAIT)
            if state.status.value == "queued":
                return "queued"
            return state.child_approvals[0].run_id if state.child_approvals else None

        child_id = self.call(eventually(waiting, seconds=60, what=f"{parent}'s child to wait"))
        if child_id == "queued":
            return
        child = Run(child_id, tenant, "sub-agent")
        self.children.append(child)
        self.decide(child, decider, approve)

    def decide(self, child: Run, decider: str, approve: bool) -> None:
        """A decision on a child's run: another tenant's is refused as for a missing run; an
        unsigned forger's only where the tenant has no keyed approver; any other answers
        exactly the decision the run recorded."""
        tenant = child.tenant
        if decider == "another tenant":
            other = self.tenants[(self.tenants.index(tenant) + 1) % 3]
            try:
                self.call(self.try_(other, "approve", child.run_id))
            except OperationError as err:
                self.same_as_missing(other, "approve", child, err)
                return
            raise AssertionError(f"{other} decided {child}")
        keyed = bool(self.signers[tenant])
        signer = self.ana if keyed and decider == "approver" else None
        by = "mallory" if decider == "forger" else ("ana" if signer else "li")
        role = None if signer else "approver"
        runs = self.stack.runs_for(tenant)
        try:
            if approve:
                work: Any = runs.runs.approve(
                    child.run_id, by=by, role=role, signer=signer, wait=WAIT
                )
            else:
                work = runs.runs.reject(
                    child.run_id, by=by, reason="no", role=role, signer=signer, wait=WAIT
                )
            answer = self.call(work)
        except OperationError as err:
            assert keyed and signer is None, f"{by}'s decision on {child} was refused: {err}"
            return
        finally:
            self.call(runs.close())
        assert not (keyed and signer is None), f"unsigned {by} decided {child}"
        expected = "approved" if approve else "rejected"
        assert answer.decision == expected, f"{child} answered {answer}"
        state = self.call(ops.status(self.stack.client, child.run_id, wait=WAIT))
        recorded = [d.decision for d in state.decided if d.approval_id == answer.approval_id]
        assert recorded == [expected], f"{child} answered {expected}, recorded {recorded}"

    @rule(t=who, path=st.sampled_from(["cli", "client", "backlog"]))
    def start_at_priority_one(self, t: int, path: str) -> None:
        """Tenant C may not take priority 1: refused (exit 5) on each path; others may."""
        tenant = self.tenants[t]
        may = tenant != self.tenants[2]
        key = f"p1-{uuid.uuid4().hex[:6]}"
        if path == "cli":
            code, out, err = self.stack.cli(
                tenant, "start", "--task", NOTIFY_TASK, "--idempotency-key", key,
                "--priority", "1", "--json",
            )  # fmt: skip
            if may:
                assert code == 0, err
                self.learn(json.loads(out)["run_id"], tenant, "cli at priority 1")
            else:
                assert code == 5 and out == "" and "priority 2, 3, 4, 5 only" in err, err
            return
        runs = self.stack.runs_for(tenant)
        try:
            if path == "client":
                work: Any = runs.runs.start(NOTIFY_TASK, idempotency_key=key, priority=1)
            else:
                task = TaskItem(
                    title="t", idempotency_key=key, spec=RunSpec(task=NOTIFY_TASK, priority=1)
                )
                work = runs.backlogs.enqueue(f"desk-{tenant}", [task], wait=WAIT)
            try:
                done = self.call(work)
            except OperationRefused as err:
                assert not may and "priority 2, 3, 4, 5 only" in str(err), err
                return
            assert may, f"{tenant} started a run at priority 1 through {path}"
            if path == "client":
                self.learn(done.run_id, tenant, "client at priority 1")
            else:
                self.owners.setdefault((f"desk-{tenant}", key), tenant)
        finally:
            self.call(runs.close())

    @rule(t=who)
    def read_and_retry_the_shared_backlog(self, t: int) -> None:
        """A tenant's backlog list and dead letters show nothing of another's; a retry of
        another's task reads as one of a key the backlog does not hold."""
        tenant = self.tenants[t]
        runs = self.stack.runs_for(tenant)
        try:
            for read in (runs.backlogs.tasks, runs.backlogs.dead):
                try:
                    found = self.call(read(self.shared))
                except OperationError as err:
                    assert "has no backlog" in str(err), err
                    continue
                # The listing (its tasks) and the dead letters: typed answers.
                listed = found.tasks if isinstance(found, BacklogListing) else found
                for task in listed:
                    owner = self.owners.get((self.shared, task.task_key))
                    assert owner == tenant, f"{tenant} was shown {owner}'s task {task}"
            # Its own retries (of tasks that seldom fail) are not under test here: others' are.
            foreign = [k for (a, k), o in self.owners.items() if a == self.shared and o != tenant]
            for key in foreign:
                missing = f"never-{uuid.uuid4().hex[:6]}"
                refusals = []
                for asked in (key, missing):
                    try:
                        self.call(runs.backlogs.retry(self.shared, asked, wait=WAIT))
                    except OperationError as err:
                        refusals.append(str(err).replace(repr(asked), "X").replace(asked, "X"))
                    else:
                        raise AssertionError(f"{tenant} retried {asked}, another's or nobody's")
                assert refusals[0] == refusals[1], refusals
        finally:
            self.call(runs.close())

    # ------------------------------------------------------------ operators' acts

    @rule(t=who, act=operator_acts)
    def try_an_operators_act(self, t: int, act: tuple[str, ...]) -> None:
        """Refused (exit 5) before anything is read: nothing printed names any run."""
        tenant = self.tenants[t]
        code, out, err = self.stack.cli(tenant, *act)
        assert code == 5 and out == "" and "an operator's act" in err, (act, code, out, err)
        assert not [r.run_id for r in self.known if r.run_id in err], (act, err)

    @rule(t=who)
    def prune_as_a_tenant(self, t: int) -> None:
        """A tenant's prune deletes its own finished runs alone: every other tenant's
        mirrored run is still there, its receipt too."""
        tenant = self.tenants[t]
        # Every tenant's finished runs, aged past the cutoff: only the caller's may go.
        self.call(self.age_finished_runs())
        before = self.others_rows(tenant)
        code, out, err = self.stack.cli(tenant, "prune", "--older-than", "1h", "--json")
        assert code == 0, err
        assert json.loads(out)["tenant"] == tenant
        assert before <= self.others_rows(tenant), f"{tenant}'s prune took another's rows"

    async def age_finished_runs(self) -> None:
        async with self.stack.pool.connection() as conn:
            await conn.execute(
                """UPDATE runs SET finished_at = finished_at - interval '1 day'
                   WHERE finished_at IS NOT NULL AND tenant = ANY(%s)""",
                (self.tenants,),
            )

    @rule(t=who)
    def add_a_notification_webhook(self, t: int) -> None:
        """A tenant's admin adds a webhook (a path of the door that answers 404, so its
        deliveries fail at once; every other tenant's in Slack's format); another tenant's
        removal of the same name reads as one of a missing webhook, and removes nothing. A
        delivery made already is made again on the admin's request; another tenant's
        request for it reads as one for a missing delivery."""
        tenant = self.tenants[t]
        http = self.stack.http
        form = "slack" if t % 2 else "json"
        hook = {"name": "ops", "url": f"{self.stack.door_url}/no-such-hook", "format": form}
        made = http.post(
            "/v1/notifications", json=hook, headers={"Authorization": f"Bearer {self.keys[tenant]}"}
        )
        assert made.status_code == 201 and made.json()["tenant"] == tenant, made.text
        assert made.json()["format"] == form, made.text
        for other in self.tenants:
            if other == tenant:
                continue
            theirs = {"Authorization": f"Bearer {self.keys[other]}"}
            listed = {h["name"] for h in http.get("/v1/notifications", headers=theirs).json()}
            if "ops" not in listed:
                gone = http.post("/v1/notifications/ops/remove", headers=theirs)
                assert gone.status_code == 404, gone.text
        mine = http.get(
            "/v1/notifications", headers={"Authorization": f"Bearer {self.keys[tenant]}"}
        )
        assert [h["name"] for h in mine.json()] == ["ops"], mine.text
        ours = {"Authorization": f"Bearer {self.keys[tenant]}"}
        made_already = http.get("/v1/notifications/ops/deliveries", headers=ours)
        assert made_already.status_code == 200, made_already.text
        for delivery in made_already.json()[:1]:
            assert delivery["tenant"] == tenant, made_already.text
            again = f"/v1/notifications/ops/deliveries/{quote(delivery['delivery_id'], safe='')}"
            for other in self.tenants:
                if other != tenant:
                    theirs = {"Authorization": f"Bearer {self.keys[other]}"}
                    missing = http.post(again + "/redeliver", headers=theirs)
                    assert missing.status_code == 404, missing.text
            redone = http.post(again + "/redeliver", headers=ours)
            assert redone.status_code == 202, redone.text
            assert redone.json()["delivery_id"] == delivery["delivery_id"], redone.text

    @rule(t=who, run=runs)
    def grant_a_standing_approval(self, t: int, run: Run) -> None:
        """A tenant's admin lets its approvers grant standing approvals and grants one (on a
        condition no call of these runs meets); scoped to another tenant's run, the grant
        reads as one on a missing run, and another tenant's revoke of it as one of a missing
        rule, byte for byte."""
        tenant = self.tenants[t]
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        http = self.stack.http
        allowed = http.put(
            "/v1/tenant/policy", json={"standing_tools": ["create_ticket"]}, headers=headers
        )
        assert allowed.status_code == 200, allowed.text
        body = {"tool": "create_ticket", "when": 'title == "never asked"', "hours": 1}
        if run.tenant != tenant:
            crossed = http.post(
                "/v1/standing-approvals", json={**body, "run_id": run.run_id}, headers=headers
            )
            missing = f"run-{tenant}~missing-{uuid.uuid4().hex[:6]}"
            absent = http.post(
                "/v1/standing-approvals", json={**body, "run_id": missing}, headers=headers
            )
            assert crossed.status_code == absent.status_code == 404, crossed.text
            assert crossed.text.replace(run.run_id, "X") == absent.text.replace(missing, "X")
        made = http.post("/v1/standing-approvals", json=body, headers=headers)
        assert made.status_code == 201, made.text
        rule_id = made.json()["rule_id"]
        self.standing[tenant].add(rule_id)
        for other in self.tenants:
            if other == tenant:
                continue
            theirs = {"Authorization": f"Bearer {self.keys[other]}"}
            missing = "sa-" + uuid.uuid4().hex[:16]
            crossed = http.post(f"/v1/standing-approvals/{rule_id}/revoke", headers=theirs)
            absent = http.post(f"/v1/standing-approvals/{missing}/revoke", headers=theirs)
            assert crossed.status_code == absent.status_code == 404, crossed.text
            assert crossed.text.replace(rule_id, "X") == absent.text.replace(missing, "X")

    def others_rows(self, tenant: str) -> set[tuple[str, str]]:
        """Every other tenant's mirrored run and receipt, as (table, run id)."""
        found = self.call(
            rows(
                self.stack.pool,
                """SELECT 'runs' AS t, run_id FROM runs WHERE tenant <> %s
                   UNION ALL
                   SELECT 'receipts', c.run_id FROM receipts c JOIN runs r USING (run_id)
                   WHERE r.tenant <> %s""",
                tenant,
                tenant,
            )
        )
        return {(r["t"], r["run_id"]) for r in found}

    @rule(target=runs, t=who, key=keys)
    def start_over_http(self, t: int, key: str) -> Run:
        tenant = self.tenants[t]
        started = self.stack.http.post(
            "/v1/runs",
            json={"task": NOTIFY_TASK},
            headers={"Authorization": f"Bearer {self.keys[tenant]}", "Idempotency-Key": key},
        )
        assert started.status_code in (200, 201), started.text
        return self.learn(started.json()["run_id"], tenant, "http")

    @rule(target=runs, t=who, key=keys)
    def start_a_thread_over_agui(self, t: int, key: str) -> Run:
        """An AG-UI thread of the tenant's: its run, named by the tenant and the thread
        (another tenant's thread of the same name is another run), read from the stream's
        first state snapshot."""
        tenant = self.tenants[t]
        thread = f"th-{key}"
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        body = agui_input(thread)
        with self.stack.http.stream("POST", AGUI_PATH, json=body, headers=headers) as answer:
            assert answer.status_code == 200, answer.read()
            run_id = next(
                json.loads(line[5:])["snapshot"]["agentledger"]["run_id"]
                for line in answer.iter_lines()
                if line.startswith("data:") and '"STATE_SNAPSHOT"' in line
            )
        assert run_id == f"run-{tenant}~agui.{thread}", run_id
        return self.learn(run_id, tenant, "agui")

    @rule(t=who, run=runs)
    def resume_another_tenants_thread(self, t: int, run: Run) -> None:
        """A resume (a decision) on another tenant's AG-UI thread reads exactly as one on a
        thread that has no run, and decides nothing."""
        tenant = self.tenants[t]
        if run.path != "agui" or run.tenant == tenant:
            return
        thread = run.run_id.split("~agui.", 1)[1]
        if any(r.run_id == f"run-{tenant}~agui.{thread}" for r in self.known):
            return  # the tenant has a thread of that name of its own
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        decision = [{"interruptId": "apr-1", "status": "resolved", "payload": {"approved": True}}]

        def resume(name: str) -> httpx.Response:
            body = agui_input(name, resume=decision)
            return self.stack.http.post(AGUI_PATH, json=body, headers=headers)

        answer = resume(thread)
        missing = f"missing-{uuid.uuid4().hex[:6]}"
        absent = resume(missing)
        assert answer.status_code == absent.status_code == 404, answer.text
        assert answer.content.replace(thread.encode(), b"X") == absent.content.replace(
            missing.encode(), b"X"
        )

    # ------------------------------------------------------------ the agent protocols

    @rule(target=runs, t=who, key=keys)
    def start_an_a2a_task(self, t: int, key: str) -> Run:
        """A message starts a task: the tenant's run, named by the message (the same
        message again is the same task). One naming a tenant is refused first."""
        tenant, other = self.tenants[t], self.tenants[(t + 1) % 3]
        text = {"messageId": f"a2a-{key}", "role": "ROLE_USER", "parts": [{"text": NOTIFY_TASK}]}
        smuggled = self.stack.http.post(
            f"/a2a/{AGENT}",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": text, "tenant": other},
            },
            headers={"Authorization": f"Bearer {self.keys[tenant]}", "A2A-Version": "1.0"},
        )
        assert smuggled.status_code == 200, (smuggled.status_code, smuggled.text)
        assert "credential" in smuggled.json()["error"]["message"], smuggled.text

        async def send() -> str:
            async with a2a_agent(self.stack.door_url, self.keys[tenant]) as agent:
                message = Message(
                    message_id=f"a2a-{key}", role=Role.ROLE_USER, parts=[Part(text=NOTIFY_TASK)]
                )
                now = SendMessageConfiguration(return_immediately=True)
                request = SendMessageRequest(message=message, configuration=now)
                [event] = [e async for e in agent.send_message(request)]
            return str(event.task.id)

        run_id = self.call(send())
        assert run_id == f"run-{tenant}~a2a.a2a-{key}", run_id
        return self.learn(run_id, tenant, "a2a")

    @rule(target=runs, t=who)
    def start_a_tool_call_over_mcp(self, t: int) -> Run:
        """A tool call, from a client of the Tasks extension: the tenant's run, as a task
        at once. A call naming a tenant is refused and starts nothing."""
        tenant, other = self.tenants[t], self.tenants[(t + 1) % 3]

        async def call() -> str:
            async with mcp_client(
                self.stack.door_url, self.keys[tenant], extensions=[Tasks()]
            ) as mcp:
                smuggled = {"task": NOTIFY_TASK, "tenant": other}
                try:
                    await mcp.session.call_tool(AGENT, smuggled, allow_claimed=True)
                except MCPError as err:
                    assert "tenant" in err.message, err.message
                else:
                    raise AssertionError("a tool call naming a tenant was taken")
                created = await mcp.session.call_tool(
                    AGENT, {"task": NOTIFY_TASK}, allow_claimed=True
                )
            return str(created.task_id)  # type: ignore[union-attr]

        run_id = self.call(call())
        assert run_id.startswith(f"run-{tenant}~mcp."), run_id
        return self.learn(run_id, tenant, "mcp")

    @initialize(target=runs, key=keys)
    def an_a2a_task_and_a_tool_call(self, key: str) -> Run:
        """Every sequence has an A2A task and an MCP tool call of B's (the tenant whose
        policy is the default, so the initializers' order does not matter); another
        tenant's A2A and MCP methods on each answer as on a missing run."""
        task, call = self.start_an_a2a_task(1, key), self.start_a_tool_call_over_mcp(1)
        for run in (task, call):
            self.a2a_as_missing(0, run, ["get", "decide"])
            self.mcp_as_missing(0, run, ["tasks/get", "tasks/update", "events"])
        return call

    @rule(t=who, run=runs, method=a2a_methods)
    def act_over_a2a(self, t: int, run: Run, method: str) -> None:
        """Another tenant's run, by every A2A method, reads exactly as a missing task."""
        if run.tenant != self.tenants[t]:
            self.a2a_as_missing(t, run, [method])  # owners' own acts: tests/test_a2a.py

    def a2a_as_missing(self, t: int, run: Run, methods: list[str]) -> None:
        tenant = self.tenants[t]
        missing = f"run-{tenant}~missing-{uuid.uuid4().hex[:6]}"

        async def ask(agent: Any, method: str, run_id: str) -> str:
            try:
                if method == "get":
                    await agent.get_task(GetTaskRequest(id=run_id))
                elif method == "cancel":
                    await agent.cancel_task(CancelTaskRequest(id=run_id))
                elif method == "subscribe":
                    await anext(agent.subscribe(SubscribeToTaskRequest(id=run_id)))
                elif method == "push configs":
                    listing = ListTaskPushNotificationConfigsRequest(task_id=run_id)
                    await agent.list_task_push_notification_configs(listing)
                else:
                    decision = json_format.ParseDict(APPROVE_REPLY, struct_pb2.Value())
                    reply = Message(
                        message_id=f"r-{uuid.uuid4().hex[:6]}",
                        task_id=run_id,
                        role=Role.ROLE_USER,
                        parts=[Part(data=decision)],
                    )
                    [_ async for _ in agent.send_message(SendMessageRequest(message=reply))]
            except A2AError as err:
                return f"{type(err).__name__}: {err}"
            raise AssertionError(f"{tenant}'s A2A {method} reached {run}")

        async def asks() -> list[tuple[str, str, str]]:
            # A streaming client: it subscribes, and sends the rest as any client does.
            async with a2a_agent(self.stack.door_url, self.keys[tenant], streaming=True) as agent:
                return [
                    (m, await ask(agent, m, run.run_id), await ask(agent, m, missing))
                    for m in methods
                ]

        for method, answer, absent in self.call(asks()):
            assert answer.replace(run.run_id, "X") == absent.replace(missing, "X"), method

    @rule(t=who, run=runs, method=mcp_methods)
    def act_over_mcp(self, t: int, run: Run, method: str) -> None:
        """Another tenant's run, by every MCP method on runs, reads exactly as a missing one;
        an own run's reads answer without one."""
        tenant = self.tenants[t]
        if run.tenant != tenant:
            self.mcp_as_missing(t, run, [method])
        elif method not in ("tasks/update", "tasks/cancel"):  # owners' own changes: not here
            [(_, answer, _)] = self.call(self.mcp_asks(tenant, [method], run.run_id, None))
            assert answer is None or "no run" not in answer, answer  # no receipt yet, say

    def mcp_as_missing(self, t: int, run: Run, methods: list[str]) -> None:
        tenant = self.tenants[t]
        missing = f"run-{tenant}~missing-{uuid.uuid4().hex[:6]}"
        for method, answer, absent in self.call(
            self.mcp_asks(tenant, methods, run.run_id, missing)
        ):
            assert answer is not None and absent is not None, f"{tenant}'s {method} reached {run}"
            assert answer.replace(run.run_id, "X") == absent.replace(missing, "X"), method

    async def mcp_asks(
        self, tenant: str, methods: list[str], run_id: str, missing: str | None
    ) -> list[tuple[str, str | None, str | None]]:
        """Each method on the run and (if given) on a missing one, with the tenant's key, in
        one client: the error each answered (None: it answered)."""
        async with mcp_client(self.stack.door_url, self.keys[tenant], extensions=[Tasks()]) as mcp:

            async def ask(method: str, target: str | None) -> str | None:
                if target is None:
                    return None
                try:
                    if method == "tasks/get":
                        asking = GetTask(params=TaskParams(task_id=target))
                        await mcp.session.send_request(asking, DetailedTask)
                    elif method == "tasks/update":
                        answers = {"approval.apr-1": APPROVE}
                        update = TaskUpdateParams(task_id=target, input_responses=answers)
                        await mcp.session.send_request(UpdateTask(params=update), DetailedTask)
                    elif method == "tasks/cancel":
                        cancel = CancelTask(params=TaskParams(task_id=target))
                        await mcp.session.send_request(cancel, mcp_types.EmptyResult)
                    else:
                        await mcp.read_resource(f"agentledger://runs/{target}/{method}")
                except MCPError as err:
                    return f"{err.code} {err.message}"
                return None

            return [(m, await ask(m, run_id), await ask(m, missing)) for m in methods]

    # ------------------------------------------------------------ runs that start themselves

    @rule(target=runs, t=who)
    def start_with_a_schedule(self, t: int) -> Run:
        """A schedule of the tenant's (`POST /v1/schedules`, made paused), fired now: its run
        is the tenant's, under the tenant's policy read at the fire (its approvers, weight
        and cap, checked with every run's at the end). Another tenant's every schedule route
        on it answers exactly as on a schedule that is not there."""
        tenant = self.tenants[t]
        name = f"s-{uuid.uuid4().hex[:6]}"
        made = self.door("POST", "/v1/schedules", tenant, json={
            "name": name, "task": NOTIFY_TASK, "cron": "0 9 1 1 *", "paused": True,
        })  # fmt: skip
        assert made.status_code == 201, made.text
        self.schedules.append((tenant, name))
        fired = self.door("POST", f"/v1/schedules/{name}/trigger", tenant)
        assert fired.status_code == 200, fired.text

        async def its_run() -> str | None:
            found = await rows(
                self.stack.pool,
                "SELECT run_id FROM schedule_fires WHERE tenant = %s AND schedule = %s",
                tenant,
                name,
            )
            if not found or found[0]["run_id"] is None:
                return None
            try:
                await ops.status(self.stack.client, found[0]["run_id"], wait=WAIT)
            except OperationError:
                return None
            return str(found[0]["run_id"])

        run_id = self.call(eventually(its_run, seconds=60, what=f"{name}'s fire to start"))
        assert run_id.startswith(f"run-~schedule.{tenant}~{name}@"), run_id
        self.schedule_as_missing((t + 1) % 3, tenant, name)
        return self.learn(run_id, tenant, "schedule")

    def schedule_as_missing(self, t: int, owner: str, name: str) -> None:
        tenant = self.tenants[t]
        assert tenant != owner
        listed = self.door("GET", "/v1/schedules", tenant)
        assert listed.status_code == 200 and name not in listed.text, listed.text
        missing = f"s-missing-{uuid.uuid4().hex[:6]}"
        for method, tail in SCHEDULE_ROUTES:
            answer = self.door(method, f"/v1/schedules/{name}{tail}", tenant)
            absent = self.door(method, f"/v1/schedules/{missing}{tail}", tenant)
            assert answer.status_code == absent.status_code == 404, (tail, answer.text)
            assert answer.content.replace(name.encode(), b"X") == absent.content.replace(
                missing.encode(), b"X"
            ), tail

    @rule(target=runs, t=who, delivery=keys)
    def start_with_a_signed_delivery(self, t: int, delivery: str) -> Run:
        """A delivery to the tenant's hook, signed with its secret, starts the tenant's run
        whatever its body names (the same delivery again is the same run); signed with that
        secret but sent to another tenant's hook, it is refused exactly as for a hook that
        is not there, and starts nothing."""
        tenant, other = self.tenants[t], self.tenants[(t + 1) % 3]
        secret = self.hook_of(tenant)
        self.hook_of(other)
        body = json.dumps({"issue": {"title": NOTIFY_TASK}, "tenant": other}).encode()
        signed = {
            "Content-Type": "application/json",
            "AgentLedger-Delivery": delivery,
            "AgentLedger-Signature": sign(secret, body, now=time.time()),
        }
        answer = self.stack.http.post(f"/v1/hooks/{tenant}.desk", content=body, headers=signed)
        assert answer.status_code in (200, 201), answer.text
        run_id = answer.json()["run_id"]
        crossed = self.stack.http.post(f"/v1/hooks/{other}.desk", content=body, headers=signed)
        absent = self.stack.http.post(f"/v1/hooks/{other}.missing", content=body, headers=signed)
        assert crossed.status_code == absent.status_code == 401, crossed.text
        assert crossed.content == absent.content
        return self.learn(run_id, tenant, "hook")

    def hook_of(self, tenant: str) -> str:
        """The tenant's hook `desk` (made by its admin the first time): its secret."""
        if tenant not in self.hooks:
            made = self.door("POST", "/v1/hooks", tenant, json={
                "name": "desk", "task": "{body.issue.title}",
            })  # fmt: skip
            assert made.status_code == 201, made.text
            self.hooks[tenant] = made.json()["secret"]
        return self.hooks[tenant]

    @initialize(target=runs)
    def a_schedule_fire_and_a_delivery(self) -> Run:
        """Every sequence has a fire of B's schedule and a delivery to B's hook (B: the
        tenant whose policy is the default, so the initializers' order does not matter)."""
        self.start_with_a_schedule(1)
        return self.start_with_a_signed_delivery(1, "first")

    def door(self, method: str, path: str, tenant: str, **kwargs: Any) -> httpx.Response:
        """The HTTP door, with the tenant's admin key."""
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}
        return self.stack.http.request(method, path, headers=headers, **kwargs)

    # ------------------------------------------------------------ acting on runs

    @rule(t=who, run=runs, route=http_routes)
    def act_over_http(self, t: int, run: Run, route: tuple[str, str, Any]) -> None:
        """Another tenant's run, on every route, answers as a missing one, byte for byte;
        an own run's reads answer without a failure."""
        tenant = self.tenants[t]
        method, tail, body = route
        if run.tenant == tenant and (method == "POST" or tail == "/events"):
            return  # owners' own changes (and endless streams) are not under test here
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"}

        def ask(run_id: str) -> httpx.Response:
            path = f"/v1/runs/{run_id}{tail}"
            return self.stack.http.request(method, path, json=body, headers=headers)

        answer = ask(run.run_id)
        if run.tenant == tenant:
            assert answer.status_code in (200, 404, 409), answer.text  # 404: not mirrored yet
            return
        missing = f"run-{tenant}~missing-{uuid.uuid4().hex[:6]}"
        absent = ask(missing)
        assert answer.status_code == absent.status_code == 404, (route, answer.text)
        assert answer.content.replace(run.run_id.encode(), b"X") == absent.content.replace(
            missing.encode(), b"X"
        ), route

    @rule(t=who, run=runs, action=reads)
    def act(self, t: int, run: Run, action: str) -> None:
        tenant = self.tenants[t]
        changes = ("pause", "cancel", "approve", "fork", "say", "chat", "end")
        if run.tenant == tenant and action in changes:
            return  # owners' own changes are not under test here: others' are
        try:
            found = self.call(self.try_(tenant, action, run.run_id))
        except OperationError as err:
            if run.tenant != tenant:
                self.same_as_missing(tenant, action, run, err)
            return
        if action == "step" and found is None:
            return  # another tenant's step reads as one the mirror has not seen
        assert run.tenant == tenant, f"{tenant}'s {action} reached {run}"

    async def try_(self, tenant: str, action: str, run_id: str) -> Any:
        client, pool = self.stack.client, self.stack.pool
        if action == "status":
            return await ops.inspect(client, run_id, tenant=tenant, mirror=pool, wait=WAIT)
        if action == "receipt":
            try:
                return await ops.receipt(pool, run_id, tenant=tenant)
            except OperationError as err:
                if "no receipt yet" in str(err):
                    return None
                raise
        if action == "watch":
            runs = self.stack.runs_for(tenant)
            try:
                items = runs.runs.watch(run_id)
                return await asyncio.wait_for(anext(items), WAIT)
            finally:
                await runs.close()
        if action == "step":  # one step's mirror row, as an AG-UI stream reads its calls
            runs = self.stack.runs_for(tenant)
            try:
                return await runs.runs.step_record(run_id, "0001-model_call")
            finally:
                await runs.close()
        if action == "chat":  # a chat turn: its message said, as `say` says one
            runs = self.stack.runs_for(tenant)
            try:
                chat = runs.sessions.chat(run_id, "from another tenant", by="mallory", wait=WAIT)
                return await asyncio.wait_for(anext(chat), WAIT * 2)
            finally:
                await runs.close()
        if action == "pause":
            return await ops.control(client, run_id, "pause", tenant=tenant, mirror=pool, wait=WAIT)
        if action == "cancel":
            return await ops.cancel(client, run_id, tenant=tenant, mirror=pool, wait=WAIT)
        if action == "say":
            return await steering_ops.say(
                client, run_id, "from another tenant", tenant=tenant, mirror=pool, wait=WAIT
            )
        if action == "end":  # ending a session (`agentledger end`)
            return await steering_ops.end_session(
                client, run_id, by="mallory", tenant=tenant, mirror=pool, wait=WAIT
            )
        if action == "approve":
            return await ops.approve(
                client, run_id, by="mallory", role="approver", tenant=tenant, mirror=pool
            )
        runs = self.stack.runs_for(tenant)
        try:
            return await runs.runs.fork(run_id, from_step=1)
        finally:
            await runs.close()

    def same_as_missing(self, tenant: str, action: str, run: Run, err: OperationError) -> None:
        missing = f"run-{tenant}~missing-{uuid.uuid4().hex[:6]}"
        try:
            self.call(self.try_(tenant, action, missing))
        except OperationError as absent:
            assert str(err).replace(run.run_id, "X") == str(absent).replace(missing, "X"), action
        else:
            raise AssertionError(f"{action} of a missing run succeeded")

    # ------------------------------------------------------------ the promises

    def backlog_runs(self) -> list[Run]:
        """The runs the backlogs started so far, each its task's tenant's."""
        found = self.call(
            rows(
                self.stack.pool,
                """SELECT agent, task_key, run_id FROM backlog_tasks
                   WHERE agent = ANY(%s) AND run_id IS NOT NULL""",
                [self.shared, *(f"desk-{tenant}" for tenant in self.tenants)],
            )
        )
        return [
            Run(child["run_id"], self.owners[(child["agent"], child["task_key"])], "backlog")
            for child in found
        ]

    @invariant()
    def each_inbox_lists_its_tenants_approvals_alone(self) -> None:
        """What the approvals inbox lists for a tenant's key (`GET /v1/approvals`)."""
        owners = {run.run_id: run.tenant for run in [*self.known, *self.children]}
        for tenant in self.tenants:
            answer = self.stack.http.get(
                "/v1/approvals", headers={"Authorization": f"Bearer {self.keys[tenant]}"}
            )
            assert answer.status_code == 200, answer.text
            listed = answer.json()
            strays = [i for i in listed if owners.get(i["run_id"], i["tenant"]) != tenant]
            assert not strays and all(i["tenant"] == tenant for i in listed), strays
            me = self.stack.http.get(
                "/v1/me", headers={"Authorization": f"Bearer {self.keys[tenant]}"}
            )
            assert me.status_code == 200 and me.json()["tenant"] == tenant, me.text
            rules = self.stack.http.get(
                "/v1/standing-approvals",
                params={"all": "true"},
                headers={"Authorization": f"Bearer {self.keys[tenant]}"},
            )
            assert rules.status_code == 200, rules.text
            assert {r["rule_id"] for r in rules.json()} == self.standing[tenant], rules.text
            hooks = self.stack.http.get(
                "/v1/notifications", headers={"Authorization": f"Bearer {self.keys[tenant]}"}
            )
            assert hooks.status_code == 200, hooks.text
            assert all(h["tenant"] == tenant for h in hooks.json()), hooks.text

    @invariant()
    def the_capped_tenant_stays_under_its_cap(self) -> None:
        capped = self.tenants[0]
        past_queue = 0
        for run in [*self.known, *self.backlog_runs()]:
            if run.tenant == capped:
                state = self.call(ops.status(self.stack.client, run.run_id, wait=WAIT))
                past_queue += state.status.value not in ("queued", *ENDED)
        assert past_queue <= 1

    def teardown(self) -> None:
        try:
            for child in self.backlog_runs():
                self.learn(child.run_id, child.tenant, child.path)
            for run in [*self.known, *self.children]:
                self.call(self.check(run))
        finally:
            for tenant, name in self.schedules:
                self.door("POST", f"/v1/schedules/{name}/delete", tenant)
            for parent in self.parents:
                with contextlib.suppress(Exception):
                    self.call(self.stack.client.get_workflow_handle(parent).terminate("over"))
            for run in self.known:
                with contextlib.suppress(Exception):
                    self.call(ops.cancel(self.stack.client, run.run_id, wait=WAIT))
            for agent in (*(f"desk-{tenant}" for tenant in self.tenants), self.shared):
                handle = self.stack.client.get_workflow_handle(f"backlog-{agent}")
                with contextlib.suppress(Exception):
                    self.call(handle.terminate("sequence over"))

    async def check(self, run: Run) -> None:
        client = self.stack.client
        state = await ops.status(client, run.run_id, wait=WAIT)
        assert state.tenant == run.tenant, run
        spec = await fork_ops.parent_input(client, run.run_id)
        carried = {s.key_id for s in spec.approval.signers}
        assert self.signers[run.tenant] <= carried, f"{run} lacks its tenant's approvers"
        described = await client.get_workflow_handle(run.run_id).describe()
        priority = described.raw_description.workflow_execution_info.priority
        assert priority.fairness_key == run.tenant
        assert (priority.fairness_weight or 1.0) == self.weights[run.tenant], run
        # Whatever path started it, it records its agent alike in its input, its state and
        # the mirror's row: a profile's name, or FREE_FORM_AGENT, never blank.
        assert spec.agent.strip() and spec.agent != "default", run
        assert state.agent == spec.agent, (run, state.agent, spec.agent)
        if spec.agent == FREE_FORM_AGENT:
            assert spec.profile_hash is None, run
        mirrored = await rows(self.stack.pool, AGENT_SQL, run.run_id)
        assert all(
            row["agent"] == spec.agent and row["receipt_agent"] in (None, spec.agent)
            for row in mirrored
        ), (run, spec.agent, mirrored)
        if run.path == "sub-agent":
            # In its parent's slot; decided by its own tenant's people alone (`decide`).
            assert state.admission is None and spec.parent_run_id is not None, run
            return
        if run.tenant == self.tenants[0]:
            assert state.admission is not None, f"{run} did not pass its tenant's cap"
        async for event in every_generation(client, run.run_id):
            if is_say(event):
                [said] = await client.data_converter.decode(
                    event.workflow_execution_signaled_event_attributes.input.payloads, [SayInput]
                )
                assert said.message_id in run.said, f"{run} was told {said} by another tenant"
                continue
            changed = event.event_type in (
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
            ) or (
                event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                and event.workflow_execution_signaled_event_attributes.signal_name
                not in ENGINE_SIGNALS
            )
            assert not changed, f"{run} was changed by another tenant: {event}"


async def every_generation(client: Client, run_id: str) -> AsyncIterator[HistoryEvent]:
    """The run's history events, its latest generation first, back to its start."""
    generation = ""
    while True:
        handle = client.get_workflow_handle(run_id, run_id=generation or None)
        events = [event async for event in handle.fetch_history_events()]
        for event in events:
            yield event
        started = events[0].workflow_execution_started_event_attributes
        generation = started.continued_execution_run_id
        if not generation:
            return


def is_say(event: HistoryEvent) -> bool:
    return (
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == SIGNAL_SAY
    )


def test_tenants_stay_apart_through_every_door(
    env: WorkflowEnvironment, database_url: str, pool: Any, tmp_path: Any
) -> None:
    global STACK
    STACK = Stack(
        env.client.service_client.config.target_host,
        database_url,
        env.client.data_converter,
        str(tmp_path),
    )
    try:
        run_state_machine_as_test(
            Tenants,
            settings=settings(
                max_examples=3,
                stateful_step_count=8,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                # No shrinking: replaying a sequence of this stack under Hypothesis's tracer
                # outlasts the test's timeout and hides the first failure behind it.
                phases=[Phase.explicit, Phase.generate],
            ),
        )
    finally:
        STACK.close()
        STACK = None
