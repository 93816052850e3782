"""Builds a worker with its injected clients; worker.py, the embedded stack and tests share it."""

from __future__ import annotations

from dataclasses import dataclass

import openai
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.worker import Worker

from activities import MirrorActivities, ModelActivities, ToolActivities, VerifyActivities
from agentrun.mirror_store import MirrorStore
from agentrun.settings import Settings, SetupError
from agentrun.tools import ToolRegistry
from workflows import AgentRunWorkflow


@dataclass
class WorkerDeps:
    """The clients a worker's activities hold; tests swap endpoints here, never code."""

    pool: AsyncConnectionPool
    model_client: openai.AsyncOpenAI
    registry: ToolRegistry


def model_client(settings: Settings) -> openai.AsyncOpenAI:
    if not settings.openai_base_url and settings.openai_api_key == "offline":
        raise SetupError(
            "No model configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a non-OpenAI "
            "endpoint), or start the local stack with `python starter.py up`."
        )
    # Temporal owns retries: the SDK must not retry underneath it.
    return openai.AsyncOpenAI(
        base_url=settings.openai_base_url, api_key=settings.openai_api_key, max_retries=0
    )


def build_worker(
    client: Client,
    settings: Settings,
    deps: WorkerDeps,
    *,
    task_queue: str | None = None,
    max_concurrent_activities: int = 100,
) -> Worker:
    store = MirrorStore(deps.pool)
    model = ModelActivities(
        deps.model_client,
        deps.registry,
        store,
        default_model=settings.model,
        prices=settings.model_prices,
        identity=client.identity,
    )
    tools = ToolActivities(deps.registry, deps.pool, store, client.identity)
    mirror = MirrorActivities(store)
    verify = VerifyActivities()
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[AgentRunWorkflow],
        activities=[
            model.complete,
            tools.invoke,
            mirror.sync,
            mirror.save_checkpoint,
            mirror.record_receipt,
            verify.check,
        ],
        max_concurrent_activities=max_concurrent_activities,
    )
