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
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from agentledger import RunClient
from agentledger.cli.main import cmd_start
from agentledger.client import approver_keys
from agentledger.core import bounds
from agentledger.core.backlog_models import MAX_TASKS_PER_ENQUEUE, TaskItem, backlog_id
from agentledger.core.errors import InvalidInput, OperationError
from agentledger.core.messages import RunMessages
from agentledger.core.spec import (
    MAX_TASK_CHARS,
    ApprovalPolicy,
    FailurePolicy,
    ModelSettings,
    RunSpec,
    VerifySpec,
)
from agentledger.core.wire import ApproveInput, ControlInput, RejectInput
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as backlog_ops
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests.backlog_support import new_agent
from tests.support import (
    NOTIFY_TASK,
    eventually,
    make_spec,
    rows,
    run_result,
    scripted,
    wait_pending,
)
from tests.test_cli import run_cli

SUMMARY = "## Summary\nDone."
QUICK_TASK = "Summarize the order policy."


async def finish(client, run_id):
    return await run_result(client, run_id)


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
        "pause": lambda: ops.control(client, "run-nope", "pause"),
        "resume": lambda: ops.control(client, "run-nope", "resume"),
        "cancel": lambda: ops.cancel(client, "run-nope"),
        "status": lambda: ops.status(client, "run-nope"),
        "approve": lambda: ops.approve(client, "run-nope", by="li", role="approver"),
    }[operation]
    with pytest.raises(OperationError, match="no run 'run-nope'"):
        await call()


async def test_a_raw_signal_to_an_unknown_run_is_refused(client):
    handle = client.get_workflow_handle("run-nope")
    with pytest.raises(RPCError) as caught:
        await handle.signal(RunMessages.PAUSE.kept_signal, ControlInput(by="mallory"))
    assert caught.value.status == RPCStatusCode.NOT_FOUND


async def test_requests_to_a_finished_run_change_nothing(client, settings, pool, worker):
    spec = make_spec(QUICK_TASK, allowed_tools=["search_notes"])
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        assert (await finish(client, started.run_id)).status.value == "completed"
        before = await mirror(pool, started.run_id)
        state_before = await ops.status(client, started.run_id)

        for attempt in (
            lambda: ops.control(client, started.run_id, "pause"),
            lambda: ops.control(client, started.run_id, "resume"),
            lambda: ops.cancel(client, started.run_id),
            lambda: ops.approve(client, started.run_id, by="li", role="approver"),
            lambda: ops.reject(client, started.run_id, by="li", role="approver", reason="late"),
        ):
            with pytest.raises(OperationError, match="has already ended"):
                await attempt()
        handle = client.get_workflow_handle(started.run_id)
        for signal in (RunMessages.PAUSE.kept_signal, RunMessages.RESUME.kept_signal):
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
            with pytest.raises(
                OperationError, match=r"no run .*: `agentledger list` shows the runs"
            ):
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


# ------------------------------------------------------- every field at ten times its bound


def _ten_times(field: str) -> str:
    return "x" * (10 * bounds.limit_for(field))


def _many(n: int = 10 * bounds.LIST_ITEMS) -> list[str]:
    return [f"t{i}" for i in range(n)]


# (what, field named in the refusal, how to send it): each at ten times its maximum.
START_FIELDS = {
    "task": {"task": _ten_times("task")},
    "instructions": {"instructions": _ten_times("instructions")},
    "agent": {"agent": _ten_times("agent")},
    "tenant": {"tenant": _ten_times("tenant")},
    "user": {"user": _ten_times("user")},
    "idempotency_key": {"idempotency_key": _ten_times("idempotency_key")},
    "profile_hash": {"profile_hash": _ten_times("profile_hash")},
    "allowed_tools": {"allowed_tools": _many()},
    "allowed_tools[0]": {"allowed_tools": [_ten_times("allowed_tools")]},
    "model.model": {"model": {"model": _ten_times("model")}},
    "approval.always": {"approval": {"always": _many()}},
    "approval.approvers[0]": {"approval": {"approvers": [_ten_times("approvers")]}},
    "approval.roles": {"approval": {"roles": {k: "approver" for k in _many()}}},
    "failures.fallback_model": {"failures": {"fallback_model": _ten_times("fallback_model")}},
    "verify.forbidden": {"verify": {"forbidden": _many()}},
    "verify.required_sections[0]": {"verify": {"required_sections": ["y" * 20_000]}},
    "verify.json_schema": {
        "verify": {"json_schema": {"type": "object", "description": "z" * 640_000}}
    },
}


def _construct(raw: dict[str, Any]) -> RunSpec:
    """A spec past a bound, built without the models' own checks (the task's, the agent's)
    so that the engine's door is what refuses it, as it would a spec sent some other way."""
    nested = {
        "model": ModelSettings,
        "approval": ApprovalPolicy,
        "failures": FailurePolicy,
        "verify": VerifySpec,
    }
    values = {
        k: nested[k].model_construct(**{**nested[k]().model_dump(), **v}) if k in nested else v
        for k, v in raw.items()
    }
    return RunSpec.model_construct(**values)


@pytest.mark.parametrize("field", sorted(START_FIELDS))
async def test_a_start_with_a_field_at_ten_times_its_bound_is_refused_before_anything_starts(
    client, settings, field
):
    spec = _construct({**make_spec("anything").model_dump(), **START_FIELDS[field]})
    with pytest.raises(bounds.InputTooLarge) as refused:
        await ops.start_run(client, spec, task_queue=settings.task_queue)
    said = str(refused.value)
    assert f"{field}: " in said and "over the limit of" in said, said
    run_id = ops.run_id_for(spec.idempotency_key or "none")
    with pytest.raises(RPCError):  # nothing was started
        await client.get_workflow_handle(run_id).describe()


DECISION_FIELDS = {
    "by": lambda c: ops.approve(c, "run-nope", by=_ten_times("by"), role="approver"),
    "role": lambda c: ops.approve(c, "run-nope", by="li", role=_ten_times("role")),
    "action_hash": lambda c: ops.approve(
        c, "run-nope", by="li", role="approver", action_hash=_ten_times("action_hash")
    ),
    "edit": lambda c: ops.approve(
        c, "run-nope", by="li", role="approver", edit={"body": _ten_times("edit")}
    ),
    "reason": lambda c: ops.reject(
        c, "run-nope", by="li", role="approver", reason=_ten_times("reason")
    ),
    "tenant": lambda c: ops.approve(
        c, "run-nope", by="li", role="approver", tenant=_ten_times("tenant")
    ),
    "run_id": lambda c: ops.approve(c, _ten_times("run_id"), by="li", role="approver"),
    "pause by": lambda c: ops.control(c, "run-nope", "pause", by=_ten_times("by")),
    "resume by": lambda c: ops.control(c, "run-nope", "resume", by=_ten_times("by")),
    "cancel run_id": lambda c: ops.cancel(c, _ten_times("run_id")),
    "backlog stop by": lambda c: backlog_ops.stop(c, "agent", by=_ten_times("by")),
    "backlog retry key": lambda c: backlog_ops.retry(c, "agent", _ten_times("key")),
    "enqueue by": lambda c: backlog_ops.enqueue(
        c, "agent", [], task_queue="none", by=_ten_times("by")
    ),
    "enqueue title": lambda c: backlog_ops.enqueue(
        c,
        "agent",
        [TaskItem.model_construct(title=_ten_times("title"), idempotency_key="k", spec=None)],
        task_queue="none",
    ),
    "fork edit_output": lambda c: fork_ops.fork_run(
        c, None, "run-nope", from_step=1, edit_output="o" * 640_000, task_queue="none"
    ),
    "fork key": lambda c: fork_ops.fork_run(
        c, None, "run-nope", from_step=1, key=_ten_times("idempotency_key"), task_queue="none"
    ),
}


@pytest.mark.parametrize("what", sorted(DECISION_FIELDS))
async def test_a_command_with_a_field_at_ten_times_its_bound_is_refused_at_the_door(client, what):
    """Refused before Temporal is asked anything (the runs named do not exist)."""
    with pytest.raises(bounds.InputTooLarge, match="over the limit of"):
        await DECISION_FIELDS[what](client)


def test_tenant_and_approver_commands_are_bounded(tmp_path):
    with pytest.raises(bounds.InputTooLarge, match="name: 2,000 characters, over the limit of 100"):
        approver_keys.create(tmp_path, "n" * 2000, "approver", None)
    with pytest.raises(bounds.InputTooLarge, match="role: "):
        approver_keys.create(tmp_path, "li", "r" * 2000, None)
    with pytest.raises(bounds.InputTooLarge, match="tenant: "):
        approver_keys.create(tmp_path, "li", "approver", "t" * 2000)
    assert not (tmp_path / "approvers").exists()


async def test_the_command_line_exits_2_naming_the_field_and_the_limit(settings, pool, tmp_path):
    for args, says in (
        (["approve", "run-nope", "--by", "b" * 2000, "--role", "approver"], "name: 2,000"),
        (["pause", "run-nope", "--tenant", "t" * 2000], "tenant: 2,000"),
        (
            ["reject", "run-nope", "--by", "li", "--role", "approver", "--reason", "r" * 20_000],
            "reason: 20,000",
        ),
        (["tenants", "set", "t" * 2000, "--weight", "2"], "tenant: 2,000"),
    ):
        result = await run_cli(settings, tmp_path, *args)
        assert result.code == 2, (args[0], result.err)
        assert says in result.err and "over the limit of" in result.err, result.err
        assert "Traceback" not in result.err


async def test_oversized_decisions_sent_raw_are_refused_by_the_run_and_recorded_once_cut_short(
    client, settings, pool, worker
):
    """Anyone with a Temporal client can skip the door. An update past a bound is refused by
    its validator and leaves nothing behind; a signal cannot be refused, so each is recorded
    once, cut short: four 300 kB `by`s no longer fail the run on its mirror write's size."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        handle = client.get_workflow_handle(started.run_id)
        huge = "m" * 300_000
        for decision in (
            ApproveInput(action_hash=pending.action_hash, by=huge, role="approver"),
            RejectInput(action_hash=pending.action_hash, by="li", role="approver", reason=huge),
            ApproveInput(action_hash=pending.action_hash, by="li", role=huge),
        ):
            update = (
                AgentRunWorkflow.approve
                if isinstance(decision, ApproveInput)
                else (AgentRunWorkflow.reject)
            )
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(update, decision)
            assert "over the limit of" in str(refused.value.cause)
        await handle.execute_update(
            AgentRunWorkflow.pause, ControlInput(by="li")
        )  # a control within bounds goes through...
        with pytest.raises(WorkflowUpdateFailedError):  # ...one past them does not
            await handle.execute_update(AgentRunWorkflow.resume, ControlInput(by=huge))
        await handle.execute_update(AgentRunWorkflow.resume, ControlInput(by="li"))
        for _ in range(4):
            await handle.signal(
                RunMessages.APPROVE.kept_signal,
                ApproveInput(action_hash=pending.action_hash, by=huge, role="approver"),
            )
        state = await eventually(
            lambda: _refused(client, started.run_id, 4), what="four refusals on the run"
        )
        assert all(len(r.by) < 300 for r in state.refusals)
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"
    refusals = await rows(
        pool,
        "SELECT data FROM events WHERE run_id = %s AND type = 'approval.refused'",
        started.run_id,
    )
    assert len(refusals) == 4, "each refused signal once; the refused updates not at all"
    assert all(len(r["data"]["by"]) < 300 for r in refusals)
    assert all("by: 300,000 characters" in r["data"]["reason"] for r in refusals)
    longest = await rows(
        pool, "SELECT max(length(data::text)) AS n FROM events WHERE run_id = %s", started.run_id
    )
    assert longest[0]["n"] < 10_000


async def _refused(client, run_id: str, n: int):
    state = await ops.status(client, run_id)
    return state if len(state.refusals) >= n else None
