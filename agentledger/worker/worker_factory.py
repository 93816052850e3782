"""Builds a worker with its injected clients; `agentledger-worker`, the embedded stack and tests
share it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import openai
from psycopg_pool import AsyncConnectionPool
from temporalio import activity
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import (
    ResourceBasedSlotConfig,
    Worker,
    WorkerDeploymentConfig,
    WorkerTuner,
)

from agentledger.activities.admission import AdmissionActivities
from agentledger.activities.agent_spans import AgentSpans
from agentledger.activities.backlog import BacklogActivities
from agentledger.activities.budget_gate import BudgetGate
from agentledger.activities.evals import EvalActivities
from agentledger.activities.fork import ForkActivities
from agentledger.activities.mirror import MirrorActivities
from agentledger.activities.model import ModelActivities
from agentledger.activities.provider_clients import ProviderClients
from agentledger.activities.run_endings import RunEndingActivities
from agentledger.activities.run_notices import RunNotices
from agentledger.activities.schedules import ScheduleActivities
from agentledger.activities.standing import StandingActivities
from agentledger.activities.tools import ToolActivities
from agentledger.activities.verify import VerifyActivities
from agentledger.activities.webhooks import WebhookActivities
from agentledger.core import fairness
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import ACTIVITY_MODEL_COMPLETE, ACTIVITY_TOOL_INVOKE
from agentledger.core.errors import SetupError
from agentledger.core.payload_limits import PayloadLimitInterceptor
from agentledger.core.providers import load_providers
from agentledger.store.artifacts import ArtifactStore
from agentledger.store.backlog_store import BacklogStore
from agentledger.store.budget_store import BudgetStore
from agentledger.store.conversation import ConversationStore
from agentledger.store.db import activity_slots_for, commit_pool_beside, open_pool, pool_size_for
from agentledger.store.fork_store import ForkStore
from agentledger.store.mirror_store import MirrorStore
from agentledger.store.model_journal import ModelJournal
from agentledger.store.standing_store import StandingStore
from agentledger.store.tenant_store import TenantStore
from agentledger.store.trigger_store import TriggerStore
from agentledger.store.vault import SecretVault
from agentledger.store.webhook_store import WebhookStore
from agentledger.tools import ToolRegistry
from agentledger.worker.drain import DrainReport, StepsInHand
from agentledger.worker.sandbox_contexts import for_converter
from agentledger.worker.workflow_code import share_workflow_code
from agentledger.workflows.engine import ENGINE_WORKFLOWS, sandboxed_runner


@dataclass
class WorkerDeps:
    """The clients a worker's activities hold; tests swap endpoints here, never code."""

    pool: AsyncConnectionPool
    model_client: openai.AsyncOpenAI
    registry: ToolRegistry
    # Named providers' keys, read at the edge (agentledger.core.providers.provider_keys).
    provider_keys: Mapping[str, str] = field(default_factory=dict)


ACTIVITY_SLOTS = 100


async def open_worker_pool(settings: AgentLedgerConfig) -> AsyncConnectionPool:
    """The Postgres pool a worker's activities share, sized for its activity slots."""
    return await open_pool(
        settings.require_database(),
        max_size=pool_size_for(ACTIVITY_SLOTS),
        prepared_statements=settings.prepared_statements,
    )


def worker_tuning(workflow_cache: int | None = None) -> dict[str, Any]:
    """Worker settings, in one place; `bench/` runs bare Temporal with the same ones.

    Measured on 2 cores (bench.run): Temporal's defaults for task
    slots and the workflow cache did as well as anything tried (fewer workflow threads was
    slower), so they stay; the sandbox gets an explicit passthrough list. The workflow cache
    is a setting (AGENTLEDGER_WORKFLOW_CACHE): each cached run holds ~0.3-0.5 MB, and a run that
    does not fit replays its history on its next task.
    """
    return {
        "max_concurrent_activities": ACTIVITY_SLOTS,
        "max_cached_workflows": (
            AgentLedgerConfig.model_fields["workflow_cache"].default
            if workflow_cache is None
            else workflow_cache
        ),
        "workflow_runner": sandboxed_runner(),
    }


def payload_guard(
    client: Client, settings: AgentLedgerConfig, store: MirrorStore
) -> PayloadLimitInterceptor:
    """The payload limit, checked with the client's own converter (and encryption codec); a
    refused model or tool result is recorded as its attempt's failure in `step_attempts`."""

    async def record(subject: Any, error: str) -> None:
        if activity.info().activity_type not in (ACTIVITY_MODEL_COMPLETE, ACTIVITY_TOOL_INVOKE):
            return
        await store.end_attempt(
            run_id=subject.run_id,
            step_id=subject.step_id,
            attempt=activity.info().attempt,
            status="failed",
            error=error,
        )

    return PayloadLimitInterceptor(
        client.data_converter, settings.payload_limit_bytes, on_refused=record
    )


class AgentWorkers:
    """The run worker, the model-call worker and the mirror worker of one process, started
    and drained together.

    Model calls have a task queue of their own (agentledger.core.fairness) so that the server's
    per-tenant rate limit there limits model calls and nothing else; mirror writes have one
    so that their priority puts them ahead of other mirror writes only, not of any tenant's
    steps.
    """

    def __init__(
        self,
        *workers: Worker,
        commit_pool: AsyncConnectionPool,
        drain: DrainReport | None = None,
    ) -> None:
        self.workers = workers
        self.commit_pool = commit_pool
        self.drain = drain
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> AgentWorkers:
        async with contextlib.AsyncExitStack() as stack:
            await self.commit_pool.open()
            stack.push_async_callback(self.commit_pool.close)  # after the workers drain
            for worker in self.workers:
                await stack.enter_async_context(worker)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.drain:
            self.drain.began()
        # Together: each drains within the grace period, not one grace period after another.
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))
        await self._stack.aclose()
        if self.drain:
            self.drain.ended()


@dataclass(frozen=True)
class ResourceTargets:
    """Size task slots by the machine instead of fixed counts (`agentledger-worker
    --resource-tuner`):
    a worker takes more steps only while CPU and memory stay under these fractions, so one
    machine does not overcommit. Costs a little ramp-up: slots grow as load is measured."""

    cpu: float = 0.8
    memory: float = 0.8

    def __post_init__(self) -> None:
        for name, value in (("cpu", self.cpu), ("memory", self.memory)):
            if not 0 < value <= 1:
                raise SetupError(f"the {name} target is a fraction of the machine, in (0, 1]")

    def tuner(self, max_activities: int) -> WorkerTuner:
        return WorkerTuner.create_resource_based(
            target_memory_usage=self.memory,
            target_cpu_usage=self.cpu,
            activity_config=ResourceBasedSlotConfig(maximum_slots=max_activities),
        )


def deployment_config(settings: AgentLedgerConfig) -> WorkerDeploymentConfig | None:
    """The version this worker declares (AGENTLEDGER_BUILD_ID), or None for an unversioned one.

    Runs are pinned: a run finishes on the build it started on, so a deploy never changes
    the code under an open run; new runs take whichever version is current. Changes that
    must reach open runs still go through `workflow.patched` on the old build's line.
    """
    if settings.build_id is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(
            deployment_name=settings.deployment_name, build_id=settings.build_id
        ),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def slot_shares(slots: int) -> tuple[int, int, int]:
    """A worker's activity slots on its three queues: (run, model calls, mirror writes).

    Mirror writes, and the model calls of tenants with a model-call rate, have queues of
    their own (agentledger.core.fairness): a fifth of the slots for the short mirror writes,
    half the rest for rated model calls. The run queue serves the steps' own tool calls and
    every other model call, and may use every slot but the mirror's, overlapping the rated
    calls' share: a call that finds a slot free there starts in the reply to the workflow
    task that scheduled it (eager dispatch), which spares the Temporal server the matching
    and one write of the run's state, its costliest unit of work (the bench
    measures it). Connections stay bounded by the pool, not
    the slots: an activity holds one at most (what a tool commits during its transaction
    goes through the commit pool), so under a burst one waits for a connection, never for
    itself.
    """
    mirror = max(1, slots // 5)
    model = max(1, (slots - mirror) // 2)
    return max(1, slots - mirror), model, mirror


@dataclass
class EngineParts:
    """The engine's activities for one client, by the queue that serves them, and what they
    share: `build_worker` and the plugin (agentledger.worker.plugin) register the same ones."""

    run_activities: list[Callable[..., Any]]
    model_activities: list[Callable[..., Any]]
    mirror_activities: list[Callable[..., Any]]
    interceptor: PayloadLimitInterceptor
    commit_pool: AsyncConnectionPool  # not yet open: opened and closed with the workers


def engine_parts(client: Client, settings: AgentLedgerConfig, deps: WorkerDeps) -> EngineParts:
    """The engine's activities, each holding its injected clients."""
    store = MirrorStore(deps.pool)
    journal = ModelJournal(deps.pool)
    vault = SecretVault.for_config(deps.pool, settings)  # one for both: secrets cross them
    spans = AgentSpans(enabled=settings.otel, capture_content=settings.otel_capture_content)
    model = ModelActivities(
        ProviderClients(deps.model_client, load_providers(settings.providers), deps.provider_keys),
        deps.registry,
        store,
        journal,
        ConversationStore(deps.pool),
        default_model=settings.model,
        prices=settings.model_prices,
        identity=client.identity,
        vault=vault,
        stream_text=settings.model_stream,
        spans=spans,
        budgets=BudgetGate(BudgetStore(deps.pool), client),
    )
    # A tool's transaction holds a connection of the pool; what it commits meanwhile (its
    # checkpoints, its lease) goes through a pool of its own, so it never waits on its peers.
    commit_pool = commit_pool_beside(deps.pool)
    tools = ToolActivities(
        deps.registry,
        deps.pool,
        store,
        client.identity,
        commits=MirrorStore(commit_pool),
        artifacts=ArtifactStore(deps.pool),
        artifact_threshold=settings.artifact_threshold_bytes,
        vault=vault,
        spans=spans,
    )
    webhook_store = WebhookStore(deps.pool)
    mirror = MirrorActivities(store, journal, spans, RunNotices(webhook_store, client))
    verify = VerifyActivities(
        deps.model_client,
        deps.registry,
        journal,
        default_model=settings.model,
        prices=settings.model_prices,
    )
    backlog = BacklogActivities(BacklogStore(deps.pool))
    admission = AdmissionActivities(TenantStore(deps.pool), client)
    fork = ForkActivities(ForkStore(deps.pool), deps.registry)
    endings = RunEndingActivities(client)
    evals = EvalActivities(deps.pool)
    webhooks = WebhookActivities(webhook_store, public_url=settings.public_url)
    schedules = ScheduleActivities(TriggerStore(deps.pool))
    standing = StandingActivities(StandingStore(deps.pool))
    return EngineParts(
        run_activities=[
            model.complete,  # a run's model calls, unless its tenant has a rate (steering.py)
            tools.invoke,
            mirror.sync,  # mirror writes scheduled before they had a queue of their own
            mirror.save_checkpoint,
            mirror.record_receipt,
            mirror.finish,
            verify.check,
            backlog.sync,
            backlog.load,
            fork.seed,
            endings.cancel_own,
            admission.sync,
            admission.closed_runs,
            admission.hold,
            admission.policy,
            evals.diverged,
            webhooks.deliver,
            webhooks.run_changes,
            webhooks.tenant_subscriptions,
            schedules.record_fire,
            standing.find,
        ],
        model_activities=[model.complete],
        mirror_activities=[mirror.sync],
        interceptor=payload_guard(client, settings, store),
        commit_pool=commit_pool,
    )


def with_engine(options: Mapping[str, Any], parts: EngineParts) -> dict[str, Any]:
    """A run-queue worker's `workflows`, `activities` and `interceptors` with the engine's
    added after `options`' own: the one place both `build_worker` and the plugin
    (agentledger.worker.plugin) register the engine, so the two cannot drift apart."""
    share_workflow_code(ENGINE_WORKFLOWS)
    return {
        "workflows": [*options.get("workflows", ()), *ENGINE_WORKFLOWS],
        "activities": [*options.get("activities", ()), *parts.run_activities],
        "interceptors": [*options.get("interceptors", ()), parts.interceptor],
    }


def side_queue_workers(
    client: Client,
    queue: str,
    parts: EngineParts,
    *,
    model: Mapping[str, Any],
    mirror: Mapping[str, Any],
) -> tuple[Worker, Worker]:
    """The run queue's model-call and mirror-write workers (agentledger.core.fairness), each
    with its own Worker options (slots, interceptors, the version)."""
    return (
        Worker(
            client,
            task_queue=fairness.model_task_queue(queue),
            activities=parts.model_activities,
            **model,
        ),
        Worker(
            client,
            task_queue=fairness.mirror_task_queue(queue),
            activities=parts.mirror_activities,
            **mirror,
        ),
    )


def run_queue_options(
    settings: AgentLedgerConfig,
    steps: StepsInHand,
    resources: ResourceTargets | None = None,
    slots: int = ACTIVITY_SLOTS,
) -> dict[str, Any]:
    """The run worker's Worker options at an edge (`agentledger-worker`, `build_worker`): its
    share of `slots` (or the machine's tuner under that ceiling), the workflow cache, the
    drain, the version, and the count of steps in hand; the plugin gives the run's side
    queues the same drain, version, tuner and interceptors
    (agentledger.worker.plugin.side_queue_options)."""
    run_slots, _, _ = slot_shares(slots)
    options: dict[str, Any] = {
        "max_cached_workflows": settings.workflow_cache,
        "graceful_shutdown_timeout": timedelta(seconds=settings.drain_seconds),
        "deployment_config": deployment_config(settings),
        "interceptors": [steps],
    }
    if resources is None:
        options["max_concurrent_activities"] = run_slots
    else:
        options["tuner"] = resources.tuner(run_slots)
    return options


def build_worker(
    client: Client,
    settings: AgentLedgerConfig,
    deps: WorkerDeps,
    *,
    task_queue: str | None = None,
    max_concurrent_activities: int | None = None,
    resources: ResourceTargets | None = None,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
) -> AgentWorkers:
    """The worker's three Temporal workers (run, model and mirror queues). `workflows` and
    `activities`: a deployment's own (a business workflow that runs an agent as a child,
    and the activities it calls), served on the run queue beside the engine's."""
    parts = engine_parts(client, settings, deps)
    tuning = worker_tuning(settings.workflow_cache)
    slots = activity_slots_for(
        deps.pool, max_concurrent_activities or tuning["max_concurrent_activities"]
    )
    _, model_slots, mirror_slots = slot_shares(slots)
    activity_only = {k: v for k, v in tuning.items() if k != "max_cached_workflows"}
    model_tuning = {**activity_only, "max_concurrent_activities": model_slots}
    mirror_tuning = {**activity_only, "max_concurrent_activities": mirror_slots}
    if resources is not None:  # slots sized by the machine, under the same ceilings
        for each in (model_tuning, mirror_tuning):
            each["tuner"] = resources.tuner(each.pop("max_concurrent_activities"))
    steps = StepsInHand()
    run_tuning = {
        **run_queue_options(settings, steps, resources, slots),
        "workflow_runner": for_converter(tuning["workflow_runner"], client.data_converter),
    }
    for each in (model_tuning, mirror_tuning):
        # The same version on all three: a pinned run's model calls go to its own build.
        each.update(
            graceful_shutdown_timeout=run_tuning["graceful_shutdown_timeout"],
            deployment_config=run_tuning["deployment_config"],
            interceptors=[steps, parts.interceptor],
        )
    queue = task_queue or settings.task_queue
    own = {
        "workflows": workflows,
        "activities": activities,
        "interceptors": run_tuning.pop("interceptors"),
    }
    return AgentWorkers(
        Worker(client, task_queue=queue, **with_engine(own, parts), **run_tuning),
        *side_queue_workers(client, queue, parts, model=model_tuning, mirror=mirror_tuning),
        commit_pool=parts.commit_pool,
        drain=DrainReport(steps, settings.drain_seconds, client.identity),
    )
