"""Agent traces and metrics from a real run: the demo's flow (search, an approved message,
an answer) on the real stack, with an in-memory span exporter, the SDK's metric buffer and
an in-memory reader on the process's OpenTelemetry meter provider (the GenAI metrics).

The worker keeps no run in memory (workflow cache 0), so every workflow task replays the
run's history first; the run's history is then replayed once more by a Replayer. Neither
may make a span or count a metric twice.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from pydantic import BaseModel
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.worker import Replayer

import agentledger.demo
from agentledger.core.constants import FREE_FORM_AGENT, OFFLINE_MODEL
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.live_gauges import pending_approvals
from agentledger.temporal.client import connect
from agentledger.tools import ToolContext, ToolRegistry
from agentledger.tools.registry import Tool
from agentledger.worker import fleet_gauges
from agentledger.worker.worker_factory import worker_tuning
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests import client_ops as steering_ops
from tests.conftest import running_worker
from tests.support import NOTIFY_TASK, eventually, make_spec, rows, wait_pending
from tests.test_sessions import SECOND, answered, session_model
from tests.test_sessions import spec as session_spec


def span_exporter() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def process_metric_reader() -> InMemoryMetricReader:
    """An in-memory reader on the process's meter provider, installed when this module is
    collected: a provider takes its readers when it is made, and may be set only once."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


GENAI_METRICS = process_metric_reader()


def histogram_points(name: str) -> dict[tuple[Any, ...], tuple[int, float]]:
    """(count, sum) of the GenAI histogram `name` per attribute set, so far in this process."""
    found: dict[tuple[Any, ...], tuple[int, float]] = {}
    data = GENAI_METRICS.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        key = tuple(sorted((point.attributes or {}).items()))
                        found[key] = (point.count, point.sum)
    return found


def grown(
    before: dict[tuple[Any, ...], tuple[int, float]],
    after: dict[tuple[Any, ...], tuple[int, float]],
) -> dict[tuple[Any, ...], tuple[int, float]]:
    """What each attribute set's (count, sum) grew by between two readings."""
    grew = {}
    for key, (count, value) in after.items():
        was = before.get(key, (0, 0.0))
        if count > was[0]:
            grew[key] = (count - was[0], value - was[1])
    return grew


class Nothing(BaseModel):
    pass


def flaky_registry() -> ToolRegistry:
    """The demo's tools and one that fails its first attempt, for the failure counter."""
    calls = {"n": 0}

    async def flaky_lookup(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("the lookup service hung up")
        return {"found": True}

    return ToolRegistry(
        [*agentledger.demo.registry.tools(), Tool("flaky_lookup", "look up", Nothing, flaky_lookup)]
    )


def sums(updates: Iterable[Any], name: str, **labels: str) -> dict[tuple[Any, ...], float]:
    """Counter deltas (or histogram values) of `name` added up per attribute set, over the
    updates whose attributes include `labels`."""
    found: dict[tuple[Any, ...], float] = defaultdict(float)
    for u in updates:
        if u.metric.name != name:
            continue
        if any(u.attributes.get(k) != v for k, v in labels.items()):
            continue
        found[tuple(sorted(u.attributes.items()))] += u.value
    return dict(found)


def total(updates: list[Any], name: str, **labels: str) -> float:
    return sum(sums(updates, name, **labels).values())


def last(updates: list[Any], name: str, **labels: str) -> float | None:
    values = [
        u.value
        for u in updates
        if u.metric.name == name and all(u.attributes.get(k) == v for k, v in labels.items())
    ]
    return values[-1] if values else None


@pytest.mark.timeout(180)
async def test_a_demo_run_traces_each_model_and_tool_call_once_and_counts_its_metrics(
    settings, pool
):
    exporter = span_exporter()
    buffer = MetricBuffer(100_000)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
    settings = settings.model_copy(update={"otel": True, "workflow_cache": 0})
    client = await connect(settings, identity="agent-telemetry", runtime=runtime)
    tenant = f"acme-{uuid.uuid4().hex[:8]}"
    updates: list[Any] = []

    async with running_worker(client, settings, pool, registry=flaky_registry()):
        demo = await ops.start_run(
            client, make_spec(NOTIFY_TASK, tenant=tenant), task_queue=settings.task_queue
        )
        flaky = await ops.start_run(
            client,
            # Its tool an activity of its own: a local attempt's failure reads as cancelled on
            # its span, which the remote path reports by its kind.
            make_spec(
                "Check the account: call flaky_lookup {}",
                tenant=tenant,
                local_read_only_tools=False,
            ),
            task_queue=settings.task_queue,
        )
        await wait_pending(client, demo.run_id)

        async def mirrored() -> bool:  # the gauges read the mirror, a batch behind the run
            return any(r["tenant"] == tenant for r in await pending_approvals(pool))

        await eventually(mirrored, what="the mirror to hold the pending approval")
        await fleet_gauges.publish_once(pool, fleet_gauges.meter_of(client), set())
        updates += buffer.retrieve_updates()
        assert last(updates, fleet_gauges.APPROVALS_PENDING, tenant=tenant) == 1
        assert (last(updates, fleet_gauges.APPROVAL_OLDEST_AGE, tenant=tenant) or -1) >= 0
        await ops.approve(client, demo.run_id, by="li", role="approver")
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, demo.run_id)
        assert (await handle.result()).status.value == "completed"
        flaky_handle = client.get_workflow_handle_for(AgentRunWorkflow.run, flaky.run_id)
        assert (await flaky_handle.result()).status.value == "completed"
        await fleet_gauges.publish_once(pool, fleet_gauges.meter_of(client), {tenant})
    updates += buffer.retrieve_updates()

    # ---- traces: the run's one trace holds a span per model call and per tool call
    spans = exporter.get_finished_spans()
    (workflow_span,) = [
        s
        for s in spans
        if s.name == "RunWorkflow:AgentRun"
        and s.attributes.get("temporalWorkflowID") == demo.run_id
    ]
    trace_id = workflow_span.context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in in_trace}

    def parent_name(span: ReadableSpan) -> str:
        assert span.parent is not None, f"{span.name} has no parent"
        return by_id[span.parent.span_id].name

    def linked_name(span: ReadableSpan) -> str:
        (link,) = span.links
        return by_id[link.context.span_id].name

    model_spans = [s for s in in_trace if s.attributes.get("gen_ai.operation.name") == "chat"]
    tool_spans = [
        s for s in in_trace if s.attributes.get("gen_ai.operation.name") == "execute_tool"
    ]
    model_steps = await rows(
        pool,
        "SELECT step_id, tokens_in, tokens_out FROM steps"
        " WHERE run_id = %s AND type = 'model_call' AND final ORDER BY seq",
        demo.run_id,
    )
    tool_steps = await rows(
        pool,
        "SELECT step_id, name FROM steps WHERE run_id = %s AND type = 'tool_call' ORDER BY seq",
        demo.run_id,
    )
    assert len(model_steps) == 3 and [t["name"] for t in tool_steps] == [
        "search_notes",
        "send_message",
    ]
    # Once each: one span per step, though every workflow task replayed the history.
    assert sorted(s.attributes["agentledger.step_id"] for s in model_spans) == sorted(
        m["step_id"] for m in model_steps
    )
    assert [s.attributes["agentledger.step_id"] for s in tool_spans] == [
        t["step_id"] for t in tool_steps
    ]
    for span, step in zip(
        sorted(model_spans, key=lambda s: s.attributes["agentledger.step_id"]),
        model_steps,
        strict=True,
    ):
        assert span.name == f"chat {OFFLINE_MODEL}"
        assert parent_name(span) == f"invoke_agent {FREE_FORM_AGENT}"
        assert linked_name(span) == "RunActivity:model.complete"
        assert span.attributes["gen_ai.request.model"] == OFFLINE_MODEL
        assert span.attributes["gen_ai.response.model"] == OFFLINE_MODEL
        assert span.attributes["gen_ai.provider.name"] == "127.0.0.1"  # the offline server
        assert span.attributes["gen_ai.usage.input_tokens"] == step["tokens_in"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] == step["tokens_out"] > 0
        assert span.attributes["agentledger.cost_usd"] > 0
        assert span.attributes["agentledger.outcome"] == "ok"
        # Content capture is off by default: no prompt and no answer on the span.
        assert "gen_ai.input.messages" not in span.attributes
        assert "gen_ai.output.messages" not in span.attributes
    for span, name in zip(tool_spans, ["search_notes", "send_message"], strict=True):
        assert span.name == f"execute_tool {name}"
        assert parent_name(span) == f"invoke_agent {FREE_FORM_AGENT}"
        assert linked_name(span) == "RunActivity:tool.invoke"
        assert span.attributes["gen_ai.tool.name"] == name
        assert str(span.attributes["gen_ai.tool.call.id"]).startswith("call_")
        assert span.attributes["agentledger.outcome"] == "ok"
        assert "gen_ai.tool.call.arguments" not in span.attributes
    # The failed attempt of the flaky tool, with its kind; the retry says why it retried.
    flaky_spans = [s for s in spans if s.attributes.get("gen_ai.tool.name") == "flaky_lookup"]
    assert [s.attributes["agentledger.outcome"] for s in flaky_spans] == ["error", "ok"]
    assert flaky_spans[0].attributes["error.type"] == "ConnectionError"
    assert "hung up" in str(flaky_spans[1].attributes["agentledger.retry.reason"])

    # ---- a replay of the whole history makes no span
    agent_spans = len(model_spans) + len(tool_spans) + 1  # and the run's invoke_agent
    workflow_spans = len([s for s in exporter.get_finished_spans() if "Workflow" in s.name])
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=client.data_converter,
        interceptors=[TracingInterceptor()],
        workflow_runner=worker_tuning()["workflow_runner"],
    )
    await replayer.replay_workflow(await handle.fetch_history())
    after = exporter.get_finished_spans()
    assert (
        len(
            [
                s
                for s in after
                if s.context.trace_id == trace_id and "gen_ai.operation.name" in s.attributes
            ]
        )
        == agent_spans
    )
    assert len([s for s in after if "Workflow" in s.name]) == workflow_spans

    # ---- metrics, read back from the SDK's meter: counted once despite the replays
    receipt = await ops.receipt(pool, demo.run_id)
    assert receipt is not None
    assert total(updates, "agentledger_runs_started", tenant=tenant) == 2
    assert total(updates, "agentledger_runs_ended", tenant=tenant, status="completed") == 2
    tokens = dict(
        (d, total(updates, "agentledger_model_tokens", tenant=tenant, direction=d))
        for d in ("input", "output")
    )
    flaky_receipt = await ops.receipt(pool, flaky.run_id)
    assert flaky_receipt is not None
    assert tokens == {
        "input": receipt["tokens_in"] + flaky_receipt["tokens_in"],
        "output": receipt["tokens_out"] + flaky_receipt["tokens_out"],
    }
    cost = total(updates, "agentledger_model_cost_usd", tenant=tenant, model=OFFLINE_MODEL)
    assert cost == pytest.approx(receipt["cost_usd"] + flaky_receipt["cost_usd"], abs=1e-6)
    assert total(updates, "agentledger_approvals_requested", tenant=tenant) == 1
    assert total(updates, "agentledger_approvals_closed", tenant=tenant, decision="approved") == 1
    assert last(updates, fleet_gauges.APPROVALS_PENDING, tenant=tenant) == 0
    assert total(updates, "agentledger_tool_failures", tool="flaky_lookup") == 1
    assert (
        total(updates, "agentledger_tool_failures", tool="flaky_lookup", kind="ConnectionError")
        == 1
    )
    lag = [u for u in updates if u.metric.name == "agentledger_mirror_lag"]
    assert lag and all(u.value >= 0 for u in lag)
    # The run metrics carry the workflow's own labels, so Prometheus can split by queue.
    started = next(u for u in updates if u.metric.name == "agentledger_runs_started")
    assert started.attributes["task_queue"] == settings.task_queue


async def test_content_capture_puts_prompts_and_answers_on_the_spans(settings, pool):
    exporter = span_exporter()
    settings = settings.model_copy(update={"otel": True, "otel_capture_content": True})
    client = await connect(settings, identity="agent-telemetry-content")
    async with running_worker(client, settings, pool):
        spec = make_spec("Summarize our invoice policy.", allowed_tools=["search_notes"])
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        assert (await handle.result()).status.value == "completed"
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes.get("agentledger.run_id") == started.run_id
    ]
    first_chat = next(s for s in spans if s.attributes["gen_ai.operation.name"] == "chat")
    assert "Summarize our invoice policy." in str(first_chat.attributes["gen_ai.input.messages"])
    assert "search_notes" in str(first_chat.attributes["gen_ai.output.messages"])
    tool = next(s for s in spans if s.attributes["gen_ai.operation.name"] == "execute_tool")
    assert "invoice" in str(tool.attributes["gen_ai.tool.call.arguments"])
    assert "gen_ai.tool.call.result" in tool.attributes


@pytest.mark.timeout(180)
async def test_a_run_replayed_across_worker_restarts_has_one_invoke_agent_span_over_its_calls(
    settings, pool
):
    """Every workflow task replays the history (cache 0), the worker is restarted twice
    mid-run, and the finished history is replayed twice more: the run still has one
    `invoke_agent` span, one span per model and tool call under it, and its GenAI metrics
    counted once per call."""
    exporter = span_exporter()
    settings = settings.model_copy(update={"otel": True, "workflow_cache": 0})
    client = await connect(settings, identity="agent-telemetry-restarts")
    tokens_before = histogram_points(gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE)
    durations_before = histogram_points(gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION)
    async with running_worker(client, settings, pool):
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
    async with running_worker(client, settings, pool):  # a restart while it waits
        await wait_pending(client, started.run_id)
    async with running_worker(client, settings, pool):  # and another
        await ops.approve(client, started.run_id, by="li", role="approver")
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        assert (await handle.result()).status.value == "completed"
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=client.data_converter,
        interceptors=[TracingInterceptor()],
        workflow_runner=worker_tuning()["workflow_runner"],
    )
    history = await handle.fetch_history()
    for _ in range(2):
        await replayer.replay_workflow(history)

    receipt = await ops.receipt(pool, started.run_id)
    assert receipt is not None
    run_spans = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes and s.attributes.get("agentledger.run_id") == started.run_id
    ]
    operation = gen_ai.GEN_AI_OPERATION_NAME
    (agent_span,) = [s for s in run_spans if s.attributes[operation] == "invoke_agent"]
    assert agent_span.name == f"invoke_agent {receipt['agent']}"
    assert agent_span.attributes[gen_ai.GEN_AI_AGENT_NAME] == receipt["agent"]
    assert agent_span.attributes[gen_ai.GEN_AI_CONVERSATION_ID] == started.run_id
    assert agent_span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == receipt["tokens_in"]
    # It spans the run, from its start to its end, though it is made at the end.
    assert agent_span.start_time is not None and agent_span.end_time is not None
    run_seconds = (agent_span.end_time - agent_span.start_time) / 1e9
    assert run_seconds > 0
    chats = [s for s in run_spans if s.attributes[operation] == "chat"]
    tools = [s for s in run_spans if s.attributes[operation] == "execute_tool"]
    model_steps = await rows(
        pool,
        "SELECT step_id FROM steps WHERE run_id = %s AND type = 'model_call' AND final",
        started.run_id,
    )
    assert len(model_steps) == 3
    assert sorted(s.attributes["agentledger.step_id"] for s in chats) == sorted(
        m["step_id"] for m in model_steps
    )
    assert [s.attributes[gen_ai.GEN_AI_TOOL_NAME] for s in tools] == [
        "search_notes",
        "send_message",
    ]
    for span in [*chats, *tools]:
        assert span.parent is not None
        assert (span.parent.trace_id, span.parent.span_id) == (
            agent_span.context.trace_id,
            agent_span.context.span_id,
        )
        assert agent_span.start_time <= span.start_time <= agent_span.end_time
    assert len(run_spans) == 1 + len(chats) + len(tools)

    # ---- the GenAI metrics, under the conventions' names, once per model call
    tokens = grown(tokens_before, histogram_points(gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE))
    by_type = {dict(key)[gen_ai.GEN_AI_TOKEN_TYPE]: point for key, point in tokens.items()}
    assert by_type == {
        "input": (3, receipt["tokens_in"]),
        "output": (3, receipt["tokens_out"]),
    }
    for key in tokens:
        attributes = dict(key)
        assert attributes[operation] == "chat"
        assert attributes[gen_ai.GEN_AI_REQUEST_MODEL] == OFFLINE_MODEL
        assert attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == OFFLINE_MODEL
        assert attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "127.0.0.1"
    durations = grown(
        durations_before, histogram_points(gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION)
    )
    ((count, seconds),) = durations.values()
    assert count == 3 and 0 < seconds < run_seconds


async def test_a_session_has_an_invoke_agent_span_per_turn_under_its_own(settings, pool):
    exporter = span_exporter()
    settings = settings.model_copy(update={"otel": True, "workflow_cache": 0})
    client = await connect(settings, identity="agent-telemetry-session")
    with OfflineModelServer(session_model()) as model:
        async with running_worker(client, settings, pool, base_url=model.base_url):
            started = await ops.start_run(
                client, session_spec(idle_timeout="1h"), task_queue=settings.task_queue
            )
            await answered(client, started.run_id, 1)
            await steering_ops.say(client, started.run_id, SECOND, by="ana")
            await answered(client, started.run_id, 2)
            await steering_ops.end_session(client, started.run_id, by="ana")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            assert (await handle.result()).status.value == "completed"
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt is not None and [t["turn"] for t in receipt["turns"]] == [1, 2]
    agents = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes
        and s.attributes.get("agentledger.run_id") == started.run_id
        and s.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    ]
    (run,) = [s for s in agents if "agentledger.turn" not in s.attributes]
    turns = sorted(
        (s for s in agents if "agentledger.turn" in s.attributes),
        key=lambda s: s.attributes["agentledger.turn"],
    )
    assert [s.attributes["agentledger.turn"] for s in turns] == [1, 2]
    for turn in turns:
        assert turn.attributes[gen_ai.GEN_AI_CONVERSATION_ID] == started.run_id
        assert turn.attributes[gen_ai.GEN_AI_AGENT_NAME] == receipt["agent"]
        assert turn.parent is not None and turn.parent.span_id == run.context.span_id
        assert turn.context.trace_id == run.context.trace_id
        assert run.start_time <= turn.start_time < turn.end_time <= run.end_time
    assert turns[0].end_time <= turns[1].start_time
