"""A payload Temporal would refuse fails fast, on its first attempt, with a reason.

Without the guard (agentledger.core.payload_limits), an oversized activity result is refused on
completion and the activity retries, and an oversized workflow input fails the workflow
task, which Temporal retries for ever. These runs use the real dev server's 2 MB limit.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

import agentledger.demo
from agentledger.client import projection
from agentledger.core.payload_limits import PayloadLimitInterceptor, trimmed
from agentledger.core.results import RunResult
from agentledger.core.spec import RunSpec
from agentledger.core.wire import MirrorBatch, RunSnapshot, StepRecord
from agentledger.dev.offline_model import OfflineModelServer, completion
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.tools.registry import ToolError
from agentledger.workflows.engine import ENGINE_WORKFLOWS
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.recorded import HISTORIES, recorded_history, replayer
from tests.support import make_spec, rows, run_result, scripted

SUMMARY = "## Summary\nDone."
MB = 1024 * 1024


class Size(BaseModel):
    kilobytes: int


async def dump(args: Size, ctx: ToolContext) -> dict[str, str]:
    return {"data": "x" * (args.kilobytes * 1024)}


async def fail_loudly(args: Size, ctx: ToolContext) -> None:
    raise ToolError("e" * (args.kilobytes * 1024))


REGISTRY = ToolRegistry(
    [
        *agentledger.demo.registry.tools(),
        Tool("dump", "produce a large output", Size, dump),
        Tool("fail_loudly", "fail with a long message", Size, fail_loudly),
    ]
)


async def run_to_end(client: Client, spec: RunSpec, task_queue: str) -> tuple[str, RunResult]:
    started = await ops.start_run(client, spec, task_queue=task_queue)
    return started.run_id, await run_result(client, started.run_id)


async def history_of(client: Client, run_id: str) -> list[Any]:
    return list((await client.get_workflow_handle(run_id).fetch_history()).events)


def activity_events(events: list[Any], activity: str) -> dict[str, list[Any]]:
    """Scheduled, started and failed events of one activity type, from real history."""
    scheduled = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]
    ids = {e.event_id for e in scheduled}
    started = [
        e.activity_task_started_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in ids
    ]
    failed = [
        e.activity_task_failed_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        and e.activity_task_failed_event_attributes.scheduled_event_id in ids
    ]
    return {"scheduled": scheduled, "started": started, "failed": failed}


def workflow_task_failures(events: list[Any]) -> list[Any]:
    return [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]


async def attempts_of(pool: Any, run_id: str, step_id: str) -> list[dict[str, Any]]:
    return await rows(
        pool,
        "SELECT attempt, status, error FROM step_attempts WHERE run_id = %s AND step_id = %s "
        "ORDER BY attempt",
        run_id,
        step_id,
    )


# ---------------------------------------------------------------- activity results


def huge_reply(request: dict[str, Any]) -> Any:
    return completion(request, content="## Summary\n" + "y" * (3 * MB))


async def test_an_oversized_model_reply_fails_the_run_on_its_first_attempt(
    client, settings, pool, worker
):
    began = time.monotonic()
    with OfflineModelServer(huge_reply) as model:
        async with worker(base_url=model.base_url):
            run_id, result = await run_to_end(client, make_spec("write a lot"), settings.task_queue)
    assert time.monotonic() - began < 60
    assert result.status.value == "failed"
    assert result.error is not None
    assert "model.complete" in result.error and "1,900,000-byte payload limit" in result.error
    assert "bytes encoded" in result.error and "max_tokens" in result.error
    assert len(model.requests) == 1, "the reply was paid for once, never asked for again"

    events = await history_of(client, run_id)
    calls = activity_events(events, "model.complete")
    assert len(calls["scheduled"]) == 1
    assert [s.attempt for s in calls["started"]] == [1]
    [failure] = calls["failed"]
    info = failure.failure.application_failure_info
    assert info.type == "PayloadTooLarge" and info.non_retryable
    assert not workflow_task_failures(events)

    step_id = "0001-model_call"
    [attempt] = await attempts_of(pool, run_id, step_id)
    assert attempt["attempt"] == 1 and attempt["status"] == "failed"
    assert attempt["error"].startswith("PayloadTooLarge: ")
    [step] = await rows(
        pool, "SELECT status, error FROM steps WHERE run_id = %s AND step_id = %s", run_id, step_id
    )
    assert step["status"] == "failed" and "PayloadTooLarge" in step["error"]
    # What the mirror held before is all still there, and the run ended recorded.
    recorded = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", run_id
    )
    assert recorded[0]["type"] == "run.started"
    assert [e["seq"] for e in recorded] == list(range(1, len(recorded) + 1))
    [run] = await rows(pool, "SELECT status, error FROM runs WHERE run_id = %s", run_id)
    assert run["status"] == "failed" and run["error"] == result.error
    receipt = await ops.receipt(pool, run_id)
    assert receipt["outcome"] == "failed" and receipt["error"] == result.error


async def test_an_oversized_tool_output_fails_its_step_at_once_and_the_model_hears_why(
    client, settings, pool
):
    """Artifacts keep tool outputs small; with the threshold raised past the limit, a 3 MB
    output is refused on its first attempt, and the run goes on as after any tool failure."""
    loose = settings.model_copy(update=dict(artifact_threshold_bytes=10 * MB))
    turns = scripted([("dump", {"kilobytes": 3 * 1024})], SUMMARY)
    began = time.monotonic()
    with OfflineModelServer(turns) as model:
        async with running_worker(client, loose, pool, registry=REGISTRY, base_url=model.base_url):
            run_id, result = await run_to_end(client, make_spec("dump"), settings.task_queue)
    assert time.monotonic() - began < 60
    assert result.status.value == "completed"

    # One attempt, refused for good (a new run's read-only tool runs as a local activity,
    # whose failure is the step's as a remote call's is).
    [attempt] = await attempts_of(pool, run_id, "0002-tool_call")
    assert (
        attempt["status"] == "failed" and "AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES" in attempt["error"]
    )
    told = model.requests[1]["messages"][-1]["content"]
    assert "payload limit" in told and "artifacts" in told and len(told) < 5000
    receipt = await ops.receipt(pool, run_id)
    assert any(
        "0002-tool_call: dump failed" in u and "payload limit" in u for u in receipt["unresolved"]
    )


# ---------------------------------------------------------------- workflow inputs


async def test_an_oversized_activity_input_fails_the_run_not_the_workflow_task(
    client, settings, pool, worker
):
    """25 tool errors of 100 KB each: every step fits, but the next model call would carry
    all of them (2.5 MB). It is refused in the workflow, before anything is sent.

    The mirror writes carry the errors into history too, so the server may first suggest
    continuing as new; then the carried conversation is what is refused. Either way the
    run ends failed with the reason, and nothing was sent or retried."""
    calls = [("fail_loudly", {"kilobytes": 100})] * 25
    began = time.monotonic()
    with OfflineModelServer(scripted(calls, SUMMARY)) as model:
        async with worker(registry=REGISTRY, base_url=model.base_url):
            # Each call an activity of its own, whose inputs and results history holds.
            spec = make_spec("fail", local_read_only_tools=False)
            run_id, result = await run_to_end(client, spec, settings.task_queue)
    assert time.monotonic() - began < 60
    assert result.status.value == "failed"
    assert result.error is not None
    refused_model_call = "the input of activity model.complete" in result.error
    assert refused_model_call or "the continue-as-new input" in result.error, result.error
    assert "1,900,000-byte payload limit" in result.error
    assert len(model.requests) == 1, "the second model call was never sent"

    events = await history_of(client, run_id)
    assert not workflow_task_failures(events), "no workflow task was failed and retried"
    assert len(activity_events(events, "model.complete")["scheduled"]) == 1
    assert len(activity_events(events, "tool.invoke")["scheduled"]) == 25
    closed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED]
    assert len(closed) == 1, "the workflow ended failed, as the run did, with its receipt"

    steps = await rows(
        pool,
        "SELECT step_id, type, status, error FROM steps WHERE run_id = %s ORDER BY seq",
        run_id,
    )
    unsent = ["model_call"] if refused_model_call else []
    assert [s["type"] for s in steps] == ["model_call"] + ["tool_call"] * 25 + unsent
    assert all(s["status"] == "failed" for s in steps[1:26]), "the tool steps are all kept"
    if refused_model_call:
        assert steps[-1]["status"] == "failed"
        assert steps[-1]["error"].startswith("PayloadTooLarge: ")
    receipt = await ops.receipt(pool, run_id)
    assert receipt["outcome"] == "failed" and receipt["error"] == result.error


class Patch(BaseModel):
    part: str
    kilobytes: int


async def save_big_checkpoint(args: Patch, ctx: ToolContext) -> dict[str, str]:
    await ctx.save_checkpoint({args.part: "c" * (args.kilobytes * 1024)})
    return {"saved": args.part}


async def test_a_checkpoint_grown_past_the_limit_fails_the_run_and_keeps_the_last_that_fit(
    client, settings, pool, worker
):
    """A 1 MB checkpoint fits, but the mirror write that carries it twice (the run row and
    the checkpoint step) does not: the run fails with that reason, and its last record goes
    with the step's copy cut, the run row's checkpoint whole."""
    registry = ToolRegistry(
        [
            *agentledger.demo.registry.tools(),
            Tool("save", "save a checkpoint part", Patch, save_big_checkpoint),
        ]
    )
    turns = scripted([("save", {"part": "a", "kilobytes": 1000})], SUMMARY)
    with OfflineModelServer(turns) as model:
        async with worker(registry=registry, base_url=model.base_url):
            run_id, result = await run_to_end(client, make_spec("save"), settings.task_queue)
    assert result.status.value == "failed"
    assert result.error is not None and "the input of activity mirror.sync" in result.error
    assert len(model.requests) == 1
    assert not workflow_task_failures(await history_of(client, run_id))
    [run] = await rows(pool, "SELECT status, checkpoint FROM runs WHERE run_id = %s", run_id)
    assert run["status"] == "failed"
    assert set(run["checkpoint"]) == {"a"} and len(run["checkpoint"]["a"]) == 1000 * 1024
    [step] = await rows(
        pool, "SELECT status, input FROM steps WHERE run_id = %s AND type = 'checkpoint'", run_id
    )
    assert step["status"] == "completed" and "1,024,000 characters" in step["input"]["a"]
    trimmed_events = await rows(
        pool, "SELECT data FROM events WHERE run_id = %s AND type = 'run.record_trimmed'", run_id
    )
    assert len(trimmed_events) == 1 and "mirror.finish" in trimmed_events[0]["data"]["reason"]
    receipt = await ops.receipt(pool, run_id)
    assert receipt["outcome"] == "failed" and receipt["error"] == result.error


async def test_a_mirror_batch_too_large_to_ride_with_a_step_is_written_on_its_own(
    client, settings, pool, worker
):
    """The next model call's own input (the tool's 200 KB error, which the model hears)
    fits, and so does the batch it would carry (the failed tool step, with the same error),
    but not the two together: the batch goes first as a `mirror.sync` of its own."""
    limit = 300_000
    turns = scripted([("fail_loudly", {"kilobytes": 200})], SUMMARY)
    small = settings.model_copy(update={"payload_limit_bytes": limit})
    with OfflineModelServer(turns) as model:
        async with worker(settings=small, registry=REGISTRY, base_url=model.base_url):
            # The tool an activity of its own, whose input the batch would ride in.
            spec = make_spec("fail_loudly", local_read_only_tools=False)
            run_id, result = await run_to_end(client, spec, settings.task_queue)
    assert result.status.value == "completed"
    events = await history_of(client, run_id)
    assert not workflow_task_failures(events)
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == [
        "model.complete",
        "tool.invoke",
        "mirror.sync",  # the tool step's record, too large to ride with the model call
        "model.complete",
        "mirror.finish",  # the run's last rows and its receipt, in one activity
    ]
    assert await projection.check(client, pool, run_id, payload_limit=limit) == []


# ---------------------------------------------------------------- the last record, replay


def test_a_last_record_too_large_to_send_is_cut_not_lost():
    snapshot = RunSnapshot(
        run_id="run-x",
        version=3,
        tenant="t",
        user="u",
        task="task",
        status="failed",
        checkpoint={"notes": "n" * 50_000, "small": "kept"},
        created_at="2025-01-01T00:00:00Z",
        updated_at="2025-01-01T00:00:00Z",
    )
    step = StepRecord(
        step_id="0001-model_call", seq=1, type="model_call", name="m", status="completed"
    )
    batch = MirrorBatch(run=snapshot, steps=[step.model_copy(update={"output": ["z" * 9000]})])
    cut = trimmed(batch)
    assert cut.run.checkpoint["small"] == "kept" and cut.run.version == 3
    assert (
        len(cut.run.checkpoint["notes"]) < 2100
        and "50,000 characters" in cut.run.checkpoint["notes"]
    )
    assert (
        cut.steps[0].output[0].startswith("z" * 2000)
        and "9,000 characters" in cut.steps[0].output[0]
    )


async def test_committed_histories_replay_with_the_guard_on():
    guarded = replayer(
        list(ENGINE_WORKFLOWS),  # every engine workflow, as a worker registers them
        interceptors=[PayloadLimitInterceptor(pydantic_data_converter)],
    )
    for path in HISTORIES:
        await guarded.replay_workflow(recorded_history(path))
