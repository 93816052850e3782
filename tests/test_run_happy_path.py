"""The whole path a run takes: plan, tool, approval gate, side effect, verify, receipt."""

from __future__ import annotations

import json
from typing import Any

from agentledger.core.results import RunResult
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import eventually, make_spec, rows, wait_pending


async def test_run_completes_with_receipt_and_mirror(client, settings, pool, worker):
    spec = make_spec()
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        assert pending.tool == "send_message"
        assert pending.arguments["to"] == "ana@example.com"
        assert pending.required_role == "approver"

        # A waiting run is visible in SQL (the mirror follows the live state within moments).
        expected = [{"status": "waiting_for_approval", "current_step_id": pending.step_id}]

        async def mirrored_waiting():
            found = await rows(
                pool, "SELECT status, current_step_id FROM runs WHERE run_id = %s", started.run_id
            )
            return found == expected

        await eventually(mirrored_waiting, what="the mirror to show the approval gate")

        await ops.approve(client, started.run_id, by="maria", role="approver")
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        result: RunResult = await handle.result()
        state = await ops.status(client, started.run_id)

    assert result.status.value == "completed"
    assert result.answer and result.answer.startswith("## Summary")
    assert [s.type for s in state.steps] == [
        "model_call",
        "tool_call",
        "model_call",
        "approval",
        "tool_call",
        "model_call",
        "verify",
    ]
    assert all(s.status in ("completed", "approved", "passed") for s in state.steps)

    run = (await rows(pool, "SELECT * FROM runs WHERE run_id = %s", started.run_id))[0]
    assert run["status"] == "completed"
    assert run["finished_at"] is not None
    assert run["tokens_in"] > 0 and run["tokens_out"] > 0 and run["cost_usd"] > 0

    # Every step the workflow accepted is a final row, in order, with the same status.
    mirrored = await rows(
        pool,
        "SELECT step_id, type, status, final FROM steps WHERE run_id = %s ORDER BY seq",
        started.run_id,
    )
    assert [(m["step_id"], m["type"], m["status"]) for m in mirrored] == [
        (s.step_id, s.type, s.status) for s in state.steps
    ]
    assert all(m["final"] for m in mirrored)

    # The side effect happened once, under its idempotency key.
    sent = await rows(
        pool, "SELECT recipient, idempotency_key FROM outbox WHERE run_id = %s", started.run_id
    )
    assert len(sent) == 1 and sent[0]["recipient"] == "ana@example.com"

    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["outcome"] == "completed"
    assert receipt["side_effects"][0]["idempotency_key"] == sent[0]["idempotency_key"]
    assert receipt["approvals"][0]["by"] == "maria"
    assert receipt["verification"]["passed"] is True
    assert receipt["cost_usd"] == float(run["cost_usd"])

    artifacts = await rows(
        pool, "SELECT name, size_bytes FROM artifacts WHERE run_id = %s", started.run_id
    )
    assert artifacts == [{"name": "answer.md", "size_bytes": len(result.answer.encode())}]

    events = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "no gaps, no doubles"
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.finished"


async def test_sql_answers_what_a_run_did_and_cost(client, settings, pool, worker):
    spec = make_spec("Summarize our invoice policy.", allowed_tools=["search_notes"])
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()

    steps = await rows(
        pool,
        "SELECT type, name, tokens_in, cost_usd FROM run_steps WHERE run_id = %s",
        started.run_id,
    )
    assert [s["type"] for s in steps] == ["model_call", "tool_call", "model_call", "verify"]
    total = await rows(
        pool,
        "SELECT sum(cost_usd) AS steps_cost,"
        " (SELECT cost_usd FROM runs WHERE run_id = %s) AS run_cost"
        " FROM steps WHERE run_id = %s",
        started.run_id,
        started.run_id,
    )
    assert total[0]["steps_cost"] == total[0]["run_cost"] > 0
    active = await rows(pool, "SELECT * FROM active_steps WHERE run_id = %s", started.run_id)
    assert active == [], "a finished run holds no step"


async def test_search_attributes_follow_the_run(client, settings, worker):
    """The Web UI filters runs by agent, tenant and status: the attributes are kept current."""
    from agentledger.core import search_attributes as sa

    spec = make_spec(
        "Summarize our invoice policy.",
        allowed_tools=["search_notes"],
        agent="clerk",
        tenant="acme",
    )
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    attributes = (
        await client.get_workflow_handle(started.run_id).describe()
    ).typed_search_attributes
    assert attributes.get(sa.AGENT) == "clerk" and attributes.get(sa.TENANT) == "acme"
    assert attributes.get(sa.STATUS) == "completed"

    async def listed():
        query = (
            'AgentrunTenant="acme" AND AgentrunStatus="completed"'
            f' AND WorkflowId="{started.run_id}"'
        )
        return [w.id async for w in client.list_workflows(query)]

    assert await eventually(listed, what="visibility to index the run") == [started.run_id]


def _local_tool_call(marker: Any) -> bool:
    """A read-only tool call the run made as a local activity (its own choice, not a cost of
    versioning or of its checks)."""
    if marker.marker_name != "core_local_activity":
        return False
    return json.loads(marker.details["data"].payloads[0].data)["activity_type"] == "tool.invoke"


def _history_costs(events: list[Any]) -> tuple[list[str], list[str], list[str]]:
    """(markers recorded, search attributes upserted, activities scheduled) of a history."""
    from temporalio.api.enums.v1 import EventType

    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and not _local_tool_call(e.marker_recorded_event_attributes)
    ]
    upserts = [
        f"{name}={value.data.decode()}"
        for e in events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        for name, value in (
            e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields.items()
        )
    ]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    return markers, upserts, scheduled


async def test_a_new_run_pays_no_marker_and_upserts_only_shown_statuses(
    client, settings, pool, worker
):
    """Generation 3 (agentledger/workflows/changes.py): a run the engine starts names its
    generation in
    its input, so it records no patch marker (and no `TemporalChangeVersion` upsert); its
    answer's checks come back with the model's reply (no verify activity, no local-activity
    marker); `AgentrunStatus` is upserted only when what a person filters on changes; it is
    "running" while the run works, so the Web UI finds it by that."""
    from agentledger.core import search_attributes as sa

    spec = make_spec("Summarize our invoice policy.", allowed_tools=["search_notes"])
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        handle = client.get_workflow_handle(started.run_id)
        assert (await handle.describe()).typed_search_attributes.get(sa.STATUS) == "running"
        result = await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    assert result.status.value == "completed"
    markers, upserts, scheduled = _history_costs((await handle.fetch_history()).events)
    assert markers == []
    assert upserts == ['AgentrunStatus="completed"']
    assert scheduled[-1] == "mirror.finish" and "mirror.sync" not in scheduled
    assert "verify.check" not in scheduled
    verify = await rows(
        pool,
        "SELECT status, output FROM steps WHERE run_id = %s AND type = 'verify'",
        started.run_id,
    )
    assert [v["status"] for v in verify] == ["passed"]
    assert verify[0]["output"]["checks"], "the verdict names the checks it ran"
