"""`local_read_only_tools`: a tool with no side effect and low risk runs as a local activity
(a marker in history, no task of its own); any other tool stays an activity of its own."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType

from agentledger.core.constants import ACTIVITY_TOOL_INVOKE
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, rows, scripted

SUMMARY = "## Summary\nThe refund policy allows 30 days."
CALLS = [
    ("search_notes", {"query": "refund policy"}),  # read-only, low risk
    ("index_documents", {"documents": ["a", "b"]}),  # no side effect, but medium risk
]


async def run_and_history(client, settings, worker, **fields):
    with OfflineModelServer(scripted(CALLS, SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec("Find the refund policy.", **fields)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            history = await handle.fetch_history()
    return started.run_id, result, history


def tools_scheduled(history) -> list[str]:
    """The tools the run scheduled as activities of their own."""
    tools = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == ACTIVITY_TOOL_INVOKE:
            tools.append(json.loads(attrs.input.payloads[0].data)["tool"])
    return tools


def local_activity_markers(history) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )


async def test_a_read_only_low_risk_tool_runs_as_a_local_activity(client, settings, pool, worker):
    run_id, result, history = await run_and_history(
        client, settings, worker, local_read_only_tools=True
    )
    assert result.status.value == "completed", result.error
    assert tools_scheduled(history) == ["index_documents"], "medium risk stays an activity"
    assert local_activity_markers(history) >= 1
    steps = await rows(
        pool,
        "SELECT name, status, output FROM steps WHERE run_id = %s AND type = 'tool_call' "
        "ORDER BY seq",
        run_id,
    )
    assert [(s["name"], s["status"]) for s in steps] == [
        ("search_notes", "completed"),
        ("index_documents", "completed"),
    ]
    assert "refund" in json.dumps(steps[0]["output"]).lower(), "the mirror has its output"


async def test_without_the_option_every_tool_is_an_activity_of_its_own(
    client, settings, pool, worker
):
    _, result, history = await run_and_history(client, settings, worker)
    assert result.status.value == "completed", result.error
    assert tools_scheduled(history) == ["search_notes", "index_documents"]
    assert local_activity_markers(history) == 0
