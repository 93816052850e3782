"""Telemetry through the entry points' own code path: `agentledger.temporal.client.connect`."""

from __future__ import annotations

import asyncio
import urllib.request

import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentledger.demo
from agentledger.core.config import AgentLedgerConfig
from agentledger.dev.stack import free_port
from agentledger.temporal.client import connect, runtime_for
from agentledger.worker.worker_factory import WorkerDeps, build_worker
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec


async def run_one(client, settings: AgentLedgerConfig, pool) -> str:
    """A short run (model, search_notes, model, verify) on a worker built on `client`."""
    deps = WorkerDeps(
        pool=pool,
        model_client=openai.AsyncOpenAI(
            base_url=settings.openai_base_url, api_key="test", max_retries=0
        ),
        registry=agentledger.demo.registry,
    )
    spec = make_spec("Summarize our invoice policy.", allowed_tools=["search_notes"])
    async with build_worker(client, settings, deps):
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        result = await handle.result()
    assert result.status.value == "completed"
    return started.run_id


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_worker_serves_temporal_metrics_for_prometheus(settings, pool):
    # A Runtime binds its port for the life of the process: one test, one fresh port.
    port = free_port()
    settings = settings.model_copy(update=dict(prometheus_bind=f"127.0.0.1:{port}"))
    client = await connect(settings, identity="metrics-worker", serve_metrics=True)
    assert client.service_client.config.runtime is runtime_for(settings)
    assert runtime_for(settings) is runtime_for(settings), "one runtime per address"

    await run_one(client, settings, pool)

    body = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
    samples = [line for line in body.splitlines() if line and not line.startswith("#")]
    names = {line.split("{")[0].split(" ")[0] for line in samples}
    for name in (
        "temporal_workflow_completed",
        "temporal_activity_execution_latency_bucket",
        "temporal_workflow_task_execution_latency_bucket",
        "temporal_request",
    ):
        assert name in names, f"{name} missing from /metrics: {sorted(names)}"
    # Labelled by what ran: our workflow type, our activities, this test's task queue.
    completed = [s for s in samples if s.startswith("temporal_workflow_completed{")]
    assert any(
        'workflow_type="AgentRun"' in s and f'task_queue="{settings.task_queue}"' in s
        for s in completed
    ), completed

    def ran(metric: str) -> set[str]:
        latency = [s for s in samples if s.startswith(f"{metric}{{")]
        return {s.split('activity_type="')[1].split('"')[0] for s in latency}

    assert {"model.complete", "mirror.finish"} <= ran("temporal_activity_execution_latency_count")
    # A read-only tool's call is a local activity in a new run, a remote one if it needs approval.
    assert "tool.invoke" in ran("temporal_activity_execution_latency_count") | ran(
        "temporal_local_activity_execution_latency_count"
    )
    # A run of generation 3 gets its checks' verdict (no judge) with the model's reply: no
    # verify activity, local or not (agentledger/workflows/agent_run.py, _verify_step).
    assert "verify.check" not in ran("temporal_local_activity_execution_latency_count")
    assert "verify.check" not in ran("temporal_activity_execution_latency_count")


async def test_otel_traces_a_run_from_start_to_every_activity(settings, pool):
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    settings = settings.model_copy(update=dict(otel=True))
    client = await connect(settings, identity="traced-worker")
    run_id = await run_one(client, settings, pool)

    spans = [
        s for s in exporter.get_finished_spans() if s.attributes.get("temporalWorkflowID") == run_id
    ]
    names = {s.name for s in spans}
    for name in (
        "StartWorkflow:AgentRun",
        "RunWorkflow:AgentRun",
        "StartActivity:model.complete",
        "RunActivity:model.complete",
        "RunActivity:tool.invoke",
    ):
        assert name in names, f"{name} missing: {sorted(names)}"
    # One trace: the start, the workflow and every activity, across the Temporal server.
    assert len({s.context.trace_id for s in spans}) == 1
