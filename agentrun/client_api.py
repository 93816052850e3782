"""`agentrun.RunClient`: the one front door to agentrun from Python.

Every operation the `agentrun` command offers is a method here, and the command is a thin
layer over them (tests/test_cli_front_door.py holds it to that). Each method delegates to
the operations layer (agentrun/ops), which decides policy; this class only holds the
connections (Temporal, made on first use; Postgres, opened on first use) and the caller's
tenant (AGENTRUN_TENANT). Signatures use only the public types `agentrun` exports.

    async with await agentrun.RunClient.connect() as runs:
        run_id = await runs.start("Summarize our refund policy.")
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, cast

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError

from agentrun.core.admission_models import TenantLimits
from agentrun.core.backlog_models import (
    BacklogControlResult,
    EnqueueResult,
    PolicyPatch,
    RetryResult,
    TaskItem,
    backlog_id,
)
from agentrun.core.builds import DeployStatus
from agentrun.core.constants import DEFAULT_WAIT_SECONDS
from agentrun.core.errors import InvalidRequest, OperationRefused, ServiceUnreachable, SetupError
from agentrun.core.plugin_config import AgentrunConfig
from agentrun.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentrun.core.results import (
    ControlResult,
    DecisionResult,
    RunResult,
    RunState,
    RunVersion,
    SayResult,
    WatchItem,
)
from agentrun.core.settings import Settings
from agentrun.core.spec import JsonDict, RunSpec, Signer
from agentrun.core.version_branches import PatchInventory
from agentrun.ops import (
    approver_keys,
    backlog_ops,
    chat_ops,
    door,
    fork_ops,
    steering_ops,
    tenant_ops,
    waiting_runs,
    watch,
)
from agentrun.ops import operations as ops
from agentrun.ops.approver_keys import ApproverKey
from agentrun.ops.operations import RunReport, Started
from agentrun.profiles import Agent
from agentrun.store import metrics, retention
from agentrun.store.approver_store import ApproverStore
from agentrun.store.db import install_tool_schema, open_pool, schema_version
from agentrun.store.metrics import Stats
from agentrun.store.retention import PruneResult
from agentrun.temporal import deployments
from agentrun.temporal.client import connect
from agentrun.temporal.encryption import speaks_pydantic
from agentrun.temporal.worker_presence import Deadline
from agentrun.tools.loading import DEMO_TOOLS, load_registry, split_references

logger = logging.getLogger(__name__)

Method = TypeVar("Method", bound=Callable[..., Any])


def refuse_under_tenant(tenant: str | None, act: str) -> None:
    """The one rule for an act that spans tenants (their settings, builds, schema or every
    run on a task queue): an operator's, refused under a tenant's scope."""
    if tenant:
        raise OperationRefused(
            f"{act}: an operator's act, not one under AGENTRUN_TENANT={tenant}; run it "
            "without AGENTRUN_TENANT (and without --tenant)"
        )


def operators_only(act: str) -> Callable[[Method], Method]:
    """A RunClient method that is an operator's act: `refuse_under_tenant` before anything
    is read or changed, so nothing it would print names another tenant's run."""

    def mark(method: Method) -> Method:
        @functools.wraps(method)
        def guarded(self: RunClient, *args: Any, **kwargs: Any) -> Any:
            refuse_under_tenant(self.tenant, act)
            return method(self, *args, **kwargs)

        return cast(Method, guarded)

    return mark


class RunClient:
    """Connections to Temporal and Postgres for one program, acting for one tenant (the
    settings' `tenant`, else any). Use it as `async with`, or call `close()` when done."""

    def __init__(
        self,
        client: Client | None,
        settings: Settings,
        *,
        wait: float | None = None,
        began: float | None = None,
    ) -> None:
        self._client = client
        self.settings = settings
        self._wait = wait  # how long connecting may take; None: as long as it takes
        # A command (`began`: its start, by `time.monotonic()`) connects to Temporal and to
        # Postgres within one bound, so that together they answer within it; a long-lived
        # client gives each connection `wait` of its own.
        self._set_up_ends_at = None if wait is None or began is None else began + wait
        self._pool: AsyncConnectionPool | None = None

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> Self:
        """Connect to the stack the settings (by default the environment) name."""
        settings = settings or Settings.load()
        return cls(await connect(settings), settings)

    @classmethod
    def on(cls, client: Client, config: AgentrunConfig) -> Self:
        """Operations over your own Client, connected with `AgentrunPlugin(config)`."""
        if not speaks_pydantic(client.data_converter):
            raise SetupError(
                "this Client was not connected with AgentrunPlugin: pass "
                "plugins=[AgentrunPlugin(config)] to Client.connect"
            )
        return cls(client, config.settings())

    @classmethod
    def lazy(
        cls,
        settings: Settings | None = None,
        *,
        wait: float | None = None,
        began: float | None = None,
    ) -> Self:
        """A client that connects to Temporal only when an operation needs it, so reads of
        the mirror work while Temporal is down. Each connection is set up within `wait`
        seconds, and all of them within `wait` of `began` if given."""
        return cls(None, settings or Settings.load(), wait=wait, began=began)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def tenant(self) -> str | None:
        """The only tenant whose runs this client sees (None: every tenant's)."""
        return self.settings.tenant

    # ------------------------------------------------------------ starting runs

    async def start(
        self, task: str | None = None, *, agent: Agent | None = None, **fields: Any
    ) -> str:
        """Start a run and return its id: `agent`'s profile expanded, `fields` (any run-spec
        field, e.g. `idempotency_key`) over it. Starting again with the same idempotency key
        returns the same run. The run takes its tenant's approvers, cap and weight from the
        database (agentrun/ops/door.py); without one, the start is refused."""
        if task is not None:
            fields["task"] = task
        if self.settings.tenant is not None:
            fields.setdefault("tenant", self.settings.tenant)
        spec = agent.spec(**fields) if agent is not None else RunSpec.model_validate(fields)
        return (await self.start_run(spec, require_tools=agent is not None)).run_id

    async def start_run(
        self, spec: RunSpec, *, require_tools: bool = False, wait: float | None = None
    ) -> Started:
        """Start the run `spec` describes: its id, whether it existed already (same
        idempotency key) and its place in its tenant's queue. With `require_tools`, a run
        naming a tool its task queue's workers lack is refused before it starts. With `wait`,
        a start no worker could take within it (a capped tenant's) is not sent at all."""
        pool = await self._mirror()
        if require_tools and spec.allowed_tools:
            await ops.require_tools(
                pool or await self._database(), self.settings.task_queue, spec.allowed_tools
            )
        if self.tenant is not None and "tenant" not in spec.model_fields_set:
            spec = spec.model_copy(update={"tenant": self.tenant})
        return await door.start(
            await self.temporal(),
            pool,
            spec,
            task_queue=self.settings.task_queue,
            indexed=self.settings.search_attributes,
            acting_tenant=self.tenant,
            wait=wait,
        )

    async def fork(
        self,
        run_id: str,
        *,
        from_step: int,
        edit_output: Any = None,
        key: str | None = None,
    ) -> str:
        """A new run from `run_id`'s step `from_step` (steps before it as recorded; an edited
        output for a tool step); returns its id."""
        return (
            await self.fork_run(run_id, from_step=from_step, edit_output=edit_output, key=key)
        ).run_id

    async def fork_run(
        self,
        run_id: str,
        *,
        from_step: int,
        edit_output: Any = None,
        key: str | None = None,
    ) -> Started:
        """`fork`, saying also whether the fork existed already (the same key)."""
        return await fork_ops.fork_run(
            await self.temporal(),
            await self._database(),
            run_id,
            from_step=from_step,
            edit_output=edit_output,
            key=key,
            task_queue=self.settings.task_queue,
            indexed=self.settings.search_attributes,
            tenant=self.tenant,
        )

    # ------------------------------------------------------------ acting on a run

    async def approve(
        self,
        run_id: str,
        *,
        by: str,
        role: str | None = None,
        edit: JsonDict | None = None,
        signer: ApproverKey | None = None,
        action_hash: str | None = None,
        wait: float = DEFAULT_WAIT_SECONDS,
    ) -> DecisionResult:
        """With `signer` (`approver_key(name)`), the decision is signed with that key, as
        runs with keyed approvers require; with `action_hash`, it holds only if the pending
        action is still that one."""
        return await ops.approve(
            await self.temporal(wait),
            run_id,
            by=by,
            role=_deciding_role(role, signer),
            edit=edit,
            tenant=self.tenant,
            action_hash=action_hash,
            wait=wait,
            mirror=await self._mirror(),
            signer=signer,
        )

    async def reject(
        self,
        run_id: str,
        *,
        by: str,
        reason: str,
        role: str | None = None,
        signer: ApproverKey | None = None,
        action_hash: str | None = None,
        wait: float = DEFAULT_WAIT_SECONDS,
    ) -> DecisionResult:
        return await ops.reject(
            await self.temporal(wait),
            run_id,
            by=by,
            role=_deciding_role(role, signer),
            reason=reason,
            tenant=self.tenant,
            action_hash=action_hash,
            wait=wait,
            mirror=await self._mirror(),
            signer=signer,
        )

    async def pause(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> ControlResult:
        """Pause at the next step boundary (recorded for later while no worker runs)."""
        return await ops.pause(
            await self.temporal(wait),
            run_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def resume(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> ControlResult:
        return await ops.resume(
            await self.temporal(wait),
            run_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def say(
        self,
        run_id: str,
        text: str,
        *,
        by: str = "cli",
        message_id: str | None = None,
        wait: float = DEFAULT_WAIT_SECONDS,
    ) -> SayResult:
        """Tell a run in flight something: it reads the message at its next model call, or,
        with `on_message: interrupt`, replans with it at once (kept while no worker runs)."""
        return await steering_ops.say(
            await self.temporal(wait),
            run_id,
            text,
            by=by,
            message_id=message_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def end_session(
        self, run_id: str, *, by: str = "cli", wait: float = DEFAULT_WAIT_SECONDS
    ) -> ControlResult:
        """End a session (spec `session`) on purpose: it completes with its last answer and
        its receipt, at once when idle, else after its current turn (kept while no worker
        runs). Refused for a run that is not a session, or has ended. docs/steering.md."""
        return await steering_ops.end_session(
            await self.temporal(wait),
            run_id,
            by=by,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    def chat(
        self,
        run_id: str,
        message: str | None,
        *,
        by: str = "cli",
        from_offset: int = 0,
        wait: float = DEFAULT_WAIT_SECONDS,
        answer_within: float = chat_ops.ANSWER_WITHIN_SECONDS,
    ) -> AsyncIterator[WatchItem]:
        """Say `message` to the run and follow it until it has answered: its events and model
        text, ending with a session's `session.turn_answered` (or the run's end and receipt).
        Ends early, saying why, with `chat.approval_pending` (decide, then follow on with
        `message=None, from_offset=` its `next_offset`) or `chat.no_answer` (no worker took
        the message, or nothing came for `answer_within` seconds). docs/steering.md."""
        return self._chat(run_id, message, by, from_offset, wait, answer_within)

    async def _chat(
        self,
        run_id: str,
        message: str | None,
        by: str,
        from_offset: int,
        wait: float,
        answer_within: float,
    ) -> AsyncIterator[WatchItem]:
        items = chat_ops.chat(
            await self.temporal(wait),
            run_id,
            message,
            by=by,
            from_offset=from_offset,
            wait=wait,
            answer_within=answer_within,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )
        async for item in items:
            yield item

    async def cancel(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> str:
        """End the run as cancelled (it writes its receipt); returns what happened."""
        return await ops.cancel(
            await self.temporal(wait),
            run_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    # ------------------------------------------------------------ reading a run

    async def status(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> RunState:
        """The live state, from the run itself (a worker answers)."""
        return await ops.status(
            await self.temporal(wait),
            run_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def inspect(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> RunReport:
        """The state with where it came from: the run itself, or the mirror while no worker
        answers; who serves the run and when it last moved."""
        return await ops.inspect(
            await self.temporal(wait),
            run_id,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run to end."""
        return await ops.result(
            await self.temporal(), run_id, tenant=self.tenant, mirror=await self._mirror()
        )

    async def receipt(self, run_id: str) -> JsonDict:
        return await ops.receipt(await self._database(), run_id, tenant=self.tenant)

    def watch(
        self, run_id: str, *, from_offset: int = 0, wait: float = DEFAULT_WAIT_SECONDS
    ) -> AsyncIterator[WatchItem]:
        """The run as it happens (events, model text), ending with its receipt when a
        database is configured; an ended run's story from the mirror."""
        return self._watch(run_id, from_offset, wait)

    async def _watch(self, run_id: str, from_offset: int, wait: float) -> AsyncIterator[WatchItem]:
        client = await self.temporal(wait)
        pool = await self._mirror()
        items = watch.watch(client, run_id, pool=pool, from_offset=from_offset, tenant=self.tenant)
        async for item in items:
            yield item

    async def version(self, run_id: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> RunVersion:
        """The worker build the run is pinned to (all None on unversioned workers)."""
        client = await self.temporal(wait)
        if self.tenant is not None:  # another tenant's run reads as a missing one
            await ops.find_run(
                client, run_id, Deadline(wait), tenant=self.tenant, mirror=await self._mirror()
            )
        return await deployments.run_version(client, run_id)

    async def list_runs(self, *, status: str | None = None, limit: int = 50) -> list[JsonDict]:
        """Recent runs from the mirror, newest first."""
        return await ops.list_runs(
            await self._database(), status=status, limit=limit, tenant=self.tenant
        )

    async def unmirrored_runs(
        self, *, status: str | None = None, limit: int = 50, wait: float = DEFAULT_WAIT_SECONDS
    ) -> list[JsonDict]:
        """Open runs Temporal holds that the mirror has not seen yet (no worker has taken
        them), newest first, shaped as `list_runs` rows; none, with a warning logged, when
        Temporal does not answer within `wait`."""
        try:
            return await asyncio.wait_for(
                waiting_runs.unmirrored(
                    await self.temporal(wait),
                    await self._database(),
                    tenant=self.tenant,
                    status=status,
                    limit=limit,
                ),
                wait,
            )
        except (ServiceUnreachable, RPCError, TimeoutError) as err:
            logger.warning("runs not yet mirrored are not listed: Temporal: %s", err)
            return []

    async def unserved_warning(self, *, wait: float = DEFAULT_WAIT_SECONDS) -> str | None:
        """Why a run just started may wait: no worker has polled its task queue lately."""
        return await waiting_runs.unserved(
            await self.temporal(wait), self.settings.task_queue, seconds=wait
        )

    async def stats(self, *, since: datetime | None = None) -> Stats:
        """Fleet figures: cost per completed run, failures, waits."""
        return await metrics.stats(await self._database(), since=since, tenant=self.tenant)

    # ------------------------------------------------------------ the mirror and the schema

    async def check_mirror(self, run_id: str) -> JsonDict:
        """Compare the run's mirror rows with those its Temporal history derives."""
        return await ops.check_mirror(
            await self.temporal(),
            await self._database(),
            run_id,
            payload_limit=self.settings.payload_limit_bytes,
            tenant=self.tenant,
        )

    async def rebuild_mirror(self, run_id: str) -> JsonDict:
        """Rewrite an ended run's mirror rows from its history, then check them."""
        return await ops.rebuild_mirror(
            await self.temporal(),
            await self._database(),
            run_id,
            payload_limit=self.settings.payload_limit_bytes,
            tenant=self.tenant,
        )

    async def prune(self, *, older_than: timedelta, dry_run: bool = False) -> PruneResult:
        """Delete what runs that finished longer ago than `older_than` recorded: this
        client's tenant's alone under one, every tenant's for an operator."""
        return await retention.prune(
            await self._database(),
            cutoff=datetime.now(UTC) - older_than,
            dry_run=dry_run,
            tenant=self.tenant,
        )

    @operators_only("migrate changes the schema every tenant's runs live in")
    async def migrate(self) -> int:
        """Bring the database's schema up to this code's version, and create the tables of
        the tools AGENTRUN_TOOLS names (the demo's by default); returns the version. The
        deploy step for a role with DDL rights: workers whose role has none start on what
        it made."""
        registry = load_registry(split_references(self.settings.tools) or [DEMO_TOOLS])
        pool = await open_pool(
            self.settings.require_database(),
            max_size=1,
            connect_seconds=self._wait or 5,
            connect_ends_at=self._set_up_ends_at,
            migrate=True,
            prepared_statements=self.settings.prepared_statements,
        )
        try:
            await install_tool_schema(pool, registry.schema())
            async with pool.connection() as conn:
                return await schema_version(conn)
        finally:
            await pool.close()

    # ------------------------------------------------------------ deployments

    @operators_only("deploy makes a build current for every tenant's new runs")
    async def deploy(
        self,
        build_id: str,
        *,
        deployment: str | None = None,
        workflows: Sequence[type] = (),
        check: bool = True,
    ) -> str:
        """Make a worker build current: new runs start on it, open runs stay pinned. Unless
        `check` is off, only after `deploy_check` passes (the open runs replay against the
        code loaded here, with `workflows`, a deployment's own, beside the engine's).
        Returns the deployment's name."""
        if check:
            report = await self.deploy_check(workflows=workflows)
            if not report.passed:
                first = report.failed[0]
                raise OperationRefused(
                    f"not deployed: {len(report.failed)} open run(s) do not replay against "
                    f"this code, first {first.workflow_id}"
                    + (f" at event {first.event_id}" if first.event_id else "")
                    + f": {first.error}; `agentrun deploy check` lists them"
                )
        name = deployment or self.settings.deployment_name
        await deployments.set_current_version(await self.temporal(), name, build_id)
        return name

    @operators_only("deploy check replays every tenant's open runs on the task queue")
    async def deploy_check(
        self,
        *,
        workflows: Sequence[type] = (),
        closed: int = 0,
        progress: Callable[[ReplayVerdict], Any] | None = None,
    ) -> DeployCheck:
        """Replay every open run on this client's task queue (and the `closed` most recent
        closed ones) against the workflows loaded here: the engine's, and `workflows`."""
        from agentrun.worker import deploy_check
        from agentrun.worker.worker_factory import ENGINE_WORKFLOWS

        return await deploy_check.check(
            await self.temporal(),
            task_queue=self.settings.task_queue,
            workflows=[*ENGINE_WORKFLOWS, *workflows],
            closed=closed,
            progress=progress,
        )

    @operators_only("deploy status lists every tenant's open runs on each build")
    async def deploy_status(
        self, *, deployment: str | None = None, workflows: Sequence[type] = ()
    ) -> DeployStatus:
        """The deployment's builds, the open runs on this client's task queue pinned to each,
        and which can be retired (not current, no open run)."""
        from agentrun.worker.deploy_check import workflow_names
        from agentrun.worker.worker_factory import ENGINE_WORKFLOWS

        return await deployments.deployment_status(
            await self.temporal(),
            deployment or self.settings.deployment_name,
            task_queue=self.settings.task_queue,
            workflow_types=workflow_names([*ENGINE_WORKFLOWS, *workflows]),
        )

    @operators_only("deploy patches lists every tenant's open runs that need a version branch")
    async def deploy_patches(self, *, workflows: Sequence[type] = ()) -> PatchInventory:
        """The version branches left in the workflow code, each with the open runs on this
        client's task queue that still need its old path (and whether it can go), and the
        open runs that need a retired branch."""
        from agentrun.worker import deploy_check
        from agentrun.worker.worker_factory import ENGINE_WORKFLOWS

        return await deploy_check.patch_inventory(
            await self.temporal(),
            task_queue=self.settings.task_queue,
            workflows=[*ENGINE_WORKFLOWS, *workflows],
        )

    # ------------------------------------------------------------ backlogs

    def backlog_held_note(self, agent: str, what: str) -> str:
        """What became of a backlog write the server holds for a worker to apply."""
        return backlog_ops.held_note(agent, self.settings.task_queue, what)

    def backlog_link(self, agent: str) -> str:
        """The Web UI's page of the agent's backlog workflow."""
        return self.settings.run_link(backlog_id(agent))

    @staticmethod
    def load_backlog_tasks(path: str | Path) -> list[TaskItem]:
        """The tasks of a JSON or YAML backlog file, checked, in order."""
        return backlog_ops.load_tasks(path)

    async def backlog_enqueue(
        self,
        agent: str,
        tasks: list[TaskItem],
        *,
        policy: PolicyPatch | None = None,
        wait: float = DEFAULT_WAIT_SECONDS,
    ) -> EnqueueResult:
        """Add tasks at the end of the agent's backlog, in order (creating it). Each task
        runs for this client's tenant (a task naming another is refused) under its tenant's
        policy (its approvers and weight), read through the door; under a tenant, `policy`
        is its own tasks' alone."""
        queued = await door.backlog_tasks(await self._mirror(), tasks, acting_tenant=self.tenant)
        return await backlog_ops.enqueue(
            await self.temporal(wait),
            agent,
            queued,
            task_queue=self.settings.task_queue,
            policy=policy,
            wait=wait,
            tenant=self.tenant,
        )

    async def backlog_stop(
        self, agent: str, *, wait: float = DEFAULT_WAIT_SECONDS
    ) -> BacklogControlResult:
        """Stop the backlog: under a tenant, that tenant's tasks alone (others' go on)."""
        return await backlog_ops.stop(
            await self.temporal(wait),
            agent,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def backlog_resume(
        self, agent: str, *, wait: float = DEFAULT_WAIT_SECONDS
    ) -> BacklogControlResult:
        """Resume the backlog: under a tenant, that tenant's stopped tasks alone."""
        return await backlog_ops.resume(
            await self.temporal(wait),
            agent,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def backlog_retry(
        self, agent: str, task_key: str, *, wait: float = DEFAULT_WAIT_SECONDS
    ) -> RetryResult:
        """Put a failed task back; another tenant's task reads as a missing one."""
        return await backlog_ops.retry(
            await self.temporal(wait),
            agent,
            task_key,
            wait=wait,
            tenant=self.tenant,
            mirror=await self._mirror(),
        )

    async def backlog_tasks(self, agent: str) -> JsonDict:
        """The backlog as the mirror last saw it, with every task (this client's tenant's
        alone, under one) in order."""
        return await backlog_ops.list_tasks(await self._database(), agent, tenant=self.tenant)

    async def backlog_dead(self, agent: str) -> list[JsonDict]:
        """The tasks that used up their attempts (this client's tenant's, under one)."""
        return await backlog_ops.dead_letters(await self._database(), agent, tenant=self.tenant)

    # ------------------------------------------------------------ tenants and approvers

    async def tenants(self) -> list[JsonDict]:
        """Every tenant (this client's alone under AGENTRUN_TENANT): its settings, runs in
        flight and queued."""
        rows = await tenant_ops.list_tenants(await self._database())
        return [r for r in rows if r["tenant"] == self.tenant] if self.tenant else rows

    @operators_only("tenants set changes a tenant's share and limits")
    async def set_tenant(self, tenant: str, changes: dict[str, Any]) -> TenantLimits:
        """Change some of a tenant's settings (weight, max_in_flight, max_queued,
        model_calls_per_second, allowed_priorities; None removes a limit), keep the rest. An
        operator's act: a tenant's cap, weight and priorities are the policy the door
        enforces on it, not its own to set."""
        return await tenant_ops.set_tenant(
            await self.temporal(),
            await self._database(),
            tenant,
            changes,
            task_queue=self.settings.task_queue,
        )

    def config_dir(self) -> Path:
        """Where approver keys live on this machine."""
        return self.settings.config_dir or approver_keys.default_config_dir()

    def approver_key(self, name: str) -> ApproverKey | None:
        """`name`'s approver key on this machine, to sign decisions with; None if absent."""
        return approver_keys.load(self.config_dir(), name)

    async def add_approver(
        self,
        name: str,
        *,
        role: str,
        tenant: str | None = None,
        any_tenant: bool = False,
        replace: bool = False,
    ) -> Signer:
        """A key pair for a new approver of `tenant`'s runs (default this client's tenant):
        the private key kept in `config_dir()`, the public key registered, so runs started
        afterwards take only signed decisions. Names are one person each per tenant; an
        approver of every tenant (`any_tenant`) and a new key for a registered name
        (`replace`) are an operator's acts, refused under AGENTRUN_TENANT."""
        scope = self._scope(tenant)
        if replace:
            refuse_under_tenant(self.tenant, "--replace gives a registered approver a new key")
        if any_tenant:
            if scope is not None:
                raise OperationRefused(
                    "--any-tenant registers an approver of every tenant's runs: an operator's "
                    f"act, not one for tenant {scope!r}; leave out --tenant and AGENTRUN_TENANT"
                )
        elif scope is None:
            raise InvalidRequest(
                "say whose runs this approver decides: --tenant NAME (or AGENTRUN_TENANT), or, "
                "as an operator, --any-tenant for every tenant's"
            )
        store = ApproverStore(await self._database())
        where = f"tenant {scope!r}" if scope else "any tenant"
        if not replace and await store.taken(name, scope):
            raise OperationRefused(
                f"an approver {name!r} is already registered for {where}: names are one person "
                "each; pick another name, or, as an operator replacing their key on purpose, "
                "add --replace"
            )
        created = approver_keys.create(self.config_dir(), name, role, scope, replace=replace)
        if not await store.add(created.signer, replace=replace):
            raise OperationRefused(
                f"an approver {name!r} was registered for {where} meanwhile; add --replace to "
                "replace their key on purpose"
            )
        return created.signer

    async def approvers(self, *, tenant: str | None = None) -> list[Signer]:
        """The approvers who decide runs of `tenant` (default this client's; an operator
        without either sees every one) and their key ids."""
        scope = self._scope(tenant)
        store = ApproverStore(await self._database())
        return await (store.registered_for(scope) if scope else store.signers())

    def _scope(self, tenant: str | None) -> str | None:
        """The tenant a command acts in: `tenant`, or this client's (AGENTRUN_TENANT), which
        `tenant` may repeat but never widen."""
        if tenant and self.tenant and tenant != self.tenant:
            raise OperationRefused(
                f"this client acts for tenant {self.tenant!r} (AGENTRUN_TENANT), not {tenant!r}"
            )
        return tenant or self.tenant

    # ------------------------------------------------------------ connections

    async def temporal(self, wait: float | None = None) -> Client:
        """The Temporal client, connected on first use (within `wait` seconds, and what is
        left of this client's bound)."""
        if self._client is None:
            self._client = await connect(
                self.settings, within_seconds=wait or self._wait, ends_at=self._set_up_ends_at
            )
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client this RunClient was made with."""
        if self._client is None:
            raise RuntimeError("not connected yet: use `await runs.temporal()`")
        return self._client

    async def _mirror(self) -> AsyncConnectionPool | None:
        """The pool when a database is configured, else None (reads that can do without)."""
        return await self._database() if self.settings.database_url else None

    async def _database(self) -> AsyncConnectionPool:
        """The Postgres pool, opened on first use and kept until `close()`; it never
        migrates (`migrate()` does)."""
        if self._pool is None:
            database = self.settings.require_database()
            self._pool = await open_pool(
                database,
                max_size=2,
                connect_seconds=self._wait or 5,
                connect_ends_at=self._set_up_ends_at,
                migrate=False,
                prepared_statements=self.settings.prepared_statements,
                statement_seconds=self._wait,
            )
            if self._wait is not None:  # nor may waiting for a connection outlast it
                self._pool.timeout = self._wait
        return self._pool


def _deciding_role(role: str | None, signer: ApproverKey | None) -> str:
    """A decision names the role it is made in: a signer's key carries it; no default is
    a free pass."""
    if signer is not None:
        return signer.signer.role
    if not role:
        raise InvalidRequest(
            "name the role this decision is made in: role='approver' (the role the approval "
            "asks for, shown by status), or pass signer= (its key carries the role)"
        )
    return role
