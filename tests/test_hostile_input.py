"""Hostile and bad input, row by row (docs/hostile-input.md): each is refused with a
message that says what is wrong, or handled safely, and nothing already recorded changes.

Rows covered elsewhere are named in the docs/hostile-input.md table rather than repeated here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.service import RPCError, RPCStatusCode

from agentrun.cli.main import cmd_start
from agentrun.client_api import RunClient
from agentrun.core.backlog_models import MAX_TASKS_PER_ENQUEUE, TaskItem, backlog_id
from agentrun.core.errors import InvalidInput, OperationError
from agentrun.core.models import MAX_TASK_CHARS, ControlInput, RunSpec
from agentrun.dev.offline_model import OfflineModelServer
from agentrun.ops import backlog_ops
from agentrun.ops import operations as ops
from agentrun.workflows import AgentRunWorkflow
from tests.backlog_support import new_agent
from tests.support import NOTIFY_TASK, eventually, make_spec, rows, scripted, wait_pending

SUMMARY = "## Summary\nDone."
QUICK_TASK = "Summarize the order policy."


async def finish(client, run_id):
    return await client.get_workflow_handle_for(AgentRunWorkflow.run, run_id).result()


async def mirror(pool, run_id: str) -> dict[str, Any]:
    """What Postgres holds for a run: its row, its steps and its receipt."""
    run = await rows(
        pool,
        "SELECT status, task, tenant, version, result, error, finished_at"
        " FROM runs WHERE run_id = %s",
        run_id,
    )
    steps = await rows(
        pool, "SELECT step_id, type, status FROM steps WHERE run_id = %s ORDER BY seq", run_id
    )
    receipt = await rows(pool, "SELECT outcome, receipt FROM receipts WHERE run_id = %s", run_id)
    return {"run": run, "steps": steps, "receipt": receipt}


# ---------------------------------------------------------------- malformed run specs


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"task": "x", "max_steps": "many"}, ("max_steps",), "valid integer"),
        ({"task": "x", "tasks": "typo"}, ("tasks",), "Extra inputs are not permitted"),
        ({"task": ""}, ("task",), "at least 1 character"),
        ({}, ("task",), "Field required"),
        ({"task": 42}, ("task",), "valid string"),
        ({"task": "x", "approval": {"roles": ["admin"]}}, ("approval", "roles"), "dictionary"),
        ({"task": "x", "budget": {"max_cost_usd": -1}}, ("budget", "max_cost_usd"), "greater"),
    ],
    ids=["wrong-type", "unknown-field", "empty-task", "no-task", "task-not-text", "nested", "neg"],
)
def test_a_malformed_run_spec_names_the_field(raw, field, message):
    with pytest.raises(ValidationError) as caught:
        RunSpec.model_validate(raw)
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [field], errors
    assert message in errors[0]["msg"]


# ---------------------------------------------------------------- an oversized task


async def test_an_oversized_task_is_refused_before_anything_starts(client, settings):
    with pytest.raises(ValidationError) as caught:
        RunSpec(task="x" * (MAX_TASK_CHARS + 1))
    assert caught.value.errors()[0]["loc"] == ("task",)
    assert f"at most {MAX_TASK_CHARS} characters" in caught.value.errors()[0]["msg"]
    RunSpec(task="x" * MAX_TASK_CHARS)  # the limit itself is fine

    key = f"oversized-{settings.task_queue}"
    args = argparse.Namespace(
        agent=None,
        agents=None,
        spec=None,
        task="x" * (MAX_TASK_CHARS + 1),
        idempotency_key=key,
        tenant=None,
        user=None,
        json=False,
    )
    with pytest.raises(InvalidInput, match="invalid run spec: task: String should have"):
        await cmd_start(RunClient(client, settings), args)
    with pytest.raises(RPCError) as missing:  # nothing was started on the real server
        await client.get_workflow_handle(ops.run_id_for(key)).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


# ---------------------------------------------------------------- unknown tools


@pytest.mark.parametrize(
    ("tool", "allowed", "told"),
    [
        ("launch_rockets", None, "unknown tool 'launch_rockets'; known tools:"),
        ("send_message", ["search_notes"], "'send_message' is not allowed in this run"),
    ],
    ids=["not-a-tool", "not-allowed"],
)
async def test_an_unknown_tool_is_reported_to_the_model_and_the_run_goes_on(
    client, settings, pool, worker, tool, allowed, told
):
    spec = make_spec("anything", allowed_tools=allowed)
    with OfflineModelServer(scripted([(tool, {"to": "x"})], SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await finish(client, started.run_id)

    assert result.status.value == "completed" and result.answer == SUMMARY
    heard = model.requests[1]["messages"][-1]
    assert heard["role"] == "tool" and told in heard["content"]
    refused = await rows(
        pool,
        "SELECT data FROM events WHERE run_id = %s AND type = 'tool.refused'",
        started.run_id,
    )
    assert [r["data"]["tool"] for r in refused] == [tool]
    recorded = await mirror(pool, started.run_id)
    assert recorded["run"][0]["status"] == "completed"
    assert all(s["type"] != "tool_call" for s in recorded["steps"]), "no tool ever ran"
    assert recorded["receipt"][0]["outcome"] == "completed"
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) == []


# ---------------------------------------------------------------- signals and updates


@pytest.mark.parametrize("operation", ["pause", "resume", "cancel", "status", "approve"])
async def test_a_request_for_an_unknown_run_is_a_clear_error(client, operation):
    call = {
        "pause": lambda: ops.pause(client, "run-nope"),
        "resume": lambda: ops.resume(client, "run-nope"),
        "cancel": lambda: ops.cancel(client, "run-nope"),
        "status": lambda: ops.status(client, "run-nope"),
        "approve": lambda: ops.approve(client, "run-nope", by="li", role="approver"),
    }[operation]
    with pytest.raises(OperationError, match="no run 'run-nope'"):
        await call()


async def test_a_raw_signal_to_an_unknown_run_is_refused(client):
    handle = client.get_workflow_handle("run-nope")
    with pytest.raises(RPCError) as caught:
        await handle.signal(AgentRunWorkflow.pause_signal, ControlInput(by="mallory"))
    assert caught.value.status == RPCStatusCode.NOT_FOUND


async def test_requests_to_a_finished_run_change_nothing(client, settings, pool, worker):
    spec = make_spec(QUICK_TASK, allowed_tools=["search_notes"])
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        assert (await finish(client, started.run_id)).status.value == "completed"
        before = await mirror(pool, started.run_id)
        state_before = await ops.status(client, started.run_id)

        for attempt in (
            lambda: ops.pause(client, started.run_id),
            lambda: ops.resume(client, started.run_id),
            lambda: ops.cancel(client, started.run_id),
            lambda: ops.approve(client, started.run_id, by="li", role="approver"),
            lambda: ops.reject(client, started.run_id, by="li", role="approver", reason="late"),
        ):
            with pytest.raises(OperationError, match="has already ended"):
                await attempt()
        handle = client.get_workflow_handle(started.run_id)
        for signal in (AgentRunWorkflow.pause_signal, AgentRunWorkflow.resume_signal):
            with pytest.raises(RPCError) as caught:
                await handle.signal(signal, ControlInput(by="mallory"))
            assert caught.value.status == RPCStatusCode.NOT_FOUND
            assert "already completed" in caught.value.message

        assert await ops.status(client, started.run_id) == state_before
    assert await mirror(pool, started.run_id) == before
    assert before["receipt"][0]["outcome"] == "completed"


# ---------------------------------------------------------------- another tenant's run


async def test_an_approval_for_another_tenants_run_is_refused(client, settings, pool, worker):
    spec = make_spec(tenant="acme")
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        before = await ops.status(client, started.run_id)

        async def mirrored_wait() -> dict[str, Any] | None:
            """The mirror once the wait's own write (not awaited by the run) has landed."""
            held = await mirror(pool, started.run_id)
            return held if held["run"][0]["status"] == "waiting_for_approval" else None

        mirrored = await eventually(mirrored_wait, what="the mirror to show the wait")
        for decide in (ops.approve, ops.reject):
            extra = {"reason": "mine now"} if decide is ops.reject else {}
            with pytest.raises(OperationError, match=r"no run .* for tenant .other."):
                await decide(
                    client, started.run_id, by="li", role="approver", tenant="other", **extra
                )
        after = await ops.status(client, started.run_id)
        assert after == before and after.status.value == "waiting_for_approval"
        assert after.pending_approval == pending
        assert await mirror(pool, started.run_id) == mirrored
        await ops.approve(client, started.run_id, by="li", role="approver", tenant="acme")
        assert (await finish(client, started.run_id)).status.value == "completed"
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) != []


# ---------------------------------------------------------------- duplicate starts


async def test_a_duplicate_start_returns_the_first_run_unchanged(client, settings, pool, worker):
    first = make_spec(NOTIFY_TASK, user="ana")
    impostor = make_spec(
        "Delete every customer record.", idempotency_key=first.idempotency_key, user="mallory"
    )
    async with worker():
        started = await ops.start_run(client, first, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        again = await ops.start_run(client, impostor, task_queue=settings.task_queue)
        assert again == ops.Started(started.run_id, existing=True)
        state = await ops.status(client, started.run_id)
        assert (state.task, state.user) == (NOTIFY_TASK, "ana")

        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"
        after_end = await ops.start_run(client, impostor, task_queue=settings.task_queue)
        assert after_end == ops.Started(started.run_id, existing=True), "ended runs too"
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        state = await handle.query(AgentRunWorkflow.state)
    assert state.task == NOTIFY_TASK and state.status.value == "completed"
    recorded = await mirror(pool, started.run_id)
    assert recorded["run"][0]["task"] == NOTIFY_TASK
    assert recorded["receipt"][0]["outcome"] == "completed"


# ---------------------------------------------------------------- huge backlog files


def _backlog(tmp_path, tasks: list[Any], name: str = "backlog.json"):
    path = tmp_path / name
    path.write_text(json.dumps(tasks))
    return path


def test_a_backlog_file_of_100_001_tasks_is_refused_whole(tmp_path):
    # Minimal items: the file is parsed in full before the count is checked
    # (see docs/hostile-input.md).
    path = _backlog(tmp_path, [{}] * 100_001)
    with pytest.raises(OperationError) as caught:
        backlog_ops.load_tasks(path)
    assert f"100001 tasks; enqueue at most {MAX_TASKS_PER_ENQUEUE} per file" in str(caught.value)


def test_a_backlog_file_one_over_the_limit_is_refused_and_the_limit_loads_in_order(tmp_path):
    tasks = [
        {"title": f"task {i}", "idempotency_key": f"k-{i:05d}"}
        for i in range(MAX_TASKS_PER_ENQUEUE + 1)
    ]
    over = _backlog(tmp_path, tasks, "over.json")
    with pytest.raises(OperationError, match=f"{MAX_TASKS_PER_ENQUEUE + 1} tasks; enqueue"):
        backlog_ops.load_tasks(over)
    at_limit = _backlog(tmp_path, tasks[:MAX_TASKS_PER_ENQUEUE], "limit.json")
    loaded = backlog_ops.load_tasks(at_limit)
    assert [t.idempotency_key for t in loaded] == [t["idempotency_key"] for t in tasks[:-1]]
    assert all(t.spec.task == t.title for t in loaded)


async def test_an_oversized_enqueue_is_refused_whole_with_a_clear_error(client, settings, pool):
    """100 valid tasks of 20,000 two-byte characters (4 MB): refused before anything is sent,
    since the backlog keeps its tasks in its state."""
    agent = new_agent("huge")
    big = [
        TaskItem(
            title=f"task {i}",
            idempotency_key=f"k-{i:03d}",
            spec=RunSpec(task="é" * MAX_TASK_CHARS, allowed_tools=["search_notes"]),
        )
        for i in range(backlog_ops.ENQUEUE_BATCH)
    ]
    with pytest.raises(OperationError, match="enqueue them in parts"):
        await backlog_ops.enqueue(client, agent, big, task_queue=settings.task_queue)
    assert await rows(pool, "SELECT 1 FROM backlog_tasks WHERE agent = %s", agent) == []
    with pytest.raises(RPCError):  # no backlog workflow was started either
        await client.get_workflow_handle(backlog_id(agent)).describe()


# ---------------------------------------------------------------- a call id repeated


async def test_a_tool_call_repeated_under_one_id_runs_once(client, settings, pool, worker):
    """A reply that lists the same call (same id) twice opens one ticket, not two, and the
    conversation answers that id once."""
    arguments = {"title": "Printer down", "body": "Floor 3"}

    def twice_one_id(request):
        reply = scripted([("create_ticket", arguments)] * 2, SUMMARY)(request)
        calls = reply.body["choices"][0]["message"].get("tool_calls") or []
        for call in calls:
            call["id"] = "call_same"
        return reply

    spec = make_spec("open a ticket")
    with OfflineModelServer(twice_one_id) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await finish(client, started.run_id)

    assert result.status.value == "completed" and result.answer == SUMMARY
    ledger = await rows(
        pool, "SELECT idempotency_key FROM tool_ledger WHERE run_id = %s", started.run_id
    )
    assert len(ledger) == 1, ledger
    tickets = await rows(
        pool, "SELECT title FROM tickets WHERE external_key = %s", ledger[0]["idempotency_key"]
    )
    assert tickets == [{"title": "Printer down"}]
    answered = [m for m in model.requests[1]["messages"] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["call_same"]
    assert len(model.requests[1]["messages"][-2]["tool_calls"]) == 1
