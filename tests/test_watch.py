"""`starter.py watch`: a run followed live from its start to its receipt; a late joiner sees
the same sequence; an ended run's story comes from the mirror; streams outlive a crash; the
model's text comes from Postgres as it streams, never through the run's history."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

from temporalio.api.enums.v1 import EventType

from agentledger.core._state import RunInput
from agentledger.core.constants import ACTIVITY_MODEL_COMPLETE
from agentledger.core.results import WatchItem
from agentledger.core.streamed_text import MAX_STREAMED_CHARS
from agentledger.core.wire import ModelCallResult
from agentledger.dev.offline_model import OfflineModelServer, Reply, offline_planner
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.run_stream import RETAINED_ITEMS
from tests import client_ops as ops
from tests import client_ops as watch
from tests.support import make_spec, rows, scripted, wait_pending
from tests.test_cli import ROOT, run_cli
from tests.test_crash_recovery import start_worker_process
from tests.test_unknown_outcomes import FAST, start_and_crash

# The most events one step adds past the check for the history limit, with one watcher:
# the step's own (schedule, start, complete, a mirror write, their workflow tasks); the
# watcher's polls are queries, which add none (they once were updates, three events each).
STEP_EVENTS_WITH_A_WATCHER = 60


async def watch_cli(settings, home, run_id: str) -> asyncio.Task[tuple[int, list[WatchItem]]]:
    """`starter.py watch RUN --json` in its own process; returns once it has printed its first
    line, with a task that collects the rest (so the test acts only once it is following)."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(home),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "watch",
        run_id,
        "--json",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 60)

    async def rest() -> tuple[int, list[WatchItem]]:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        lines = [first, *out.splitlines()]
        return proc.returncode, [WatchItem.model_validate_json(line) for line in lines]

    return asyncio.create_task(rest())


async def follow(client, pool, run_id, **kwargs) -> list[WatchItem]:
    return [item async for item in watch.watch(client, run_id, pool=pool, **kwargs)]


def check_story(items: list[WatchItem]) -> None:
    """Every event once and in order, the stream's offsets whole, steps in order, receipt.
    Events the stream's last reads could not give come from the mirror after the streamed
    ones (without an offset). A model call's text (from Postgres, without offsets) comes
    before its step ends, and none of it after."""
    live = [i for i in items if i.kind != "receipt"]
    said = [i for i in live if i.kind == "event"]
    streamed = [i for i in said if i.offset is not None]
    assert said[: len(streamed)] == streamed
    assert [i.offset for i in streamed] == list(range(len(streamed)))
    events = [i for i in said if i.type != "step.retry"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run.started" and events[-1].type == "run.finished"
    finished = [e.step_id for e in events if e.type.startswith("step.")]
    assert finished == sorted(finished)
    for step in {i.step_id for i in live if i.kind in ("text", "text_reset")}:
        ended = [
            n
            for n, i in enumerate(live)
            if i.step_id == step and i.type.startswith("step.") and i.type != "step.retry"
        ]
        texts = [n for n, i in enumerate(live) if i.step_id == step and i.kind != "event"]
        assert ended and max(texts) < min(ended), step
    assert items[-1].kind == "receipt" and items[-1].data["outcome"] == "completed"


def text_of(items: list[WatchItem], step_id: str) -> str:
    """A step's text as a watcher shows it: what followed the last reset."""
    text = ""
    for item in items:
        if item.step_id == step_id and item.kind == "text_reset":
            text = ""
        elif item.step_id == step_id and item.kind == "text":
            text += item.text or ""
    return text


async def test_watch_json_follows_a_run_to_its_receipt_and_a_late_joiner_sees_the_same(
    client, settings, pool, worker, tmp_path
):
    # A model that streams its answer over about a second: several batches of text.
    with OfflineModelServer(stream_pause_seconds=0.05) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
            code, items, late_items, pending = await watch_live_and_late(
                client, pool, settings, tmp_path, started.run_id
            )

    assert code == 0
    assert items[0].offset == 0  # followed live, from the start
    check_story(items)
    # The late joiner got the same events, and each step's text whole (in its own pieces:
    # what came before it joined, it read from the steps' rows).
    assert [i for i in late_items if i.kind != "text"] == [i for i in items if i.kind != "text"]
    steps = {i.step_id for i in items if i.kind == "text"}
    assert {s: text_of(late_items, s) for s in steps} == {s: text_of(items, s) for s in steps}
    mirrored = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    assert [(i.seq, i.type) for i in items if i.kind == "event"] == [
        (r["seq"], r["type"]) for r in mirrored
    ]
    requested = next(i for i in items if i.type == "approval.requested")
    assert requested.data["tool"] == pending.tool == "send_message"
    types = [i.type for i in items]
    assert types.index("approval.requested") < types.index("approval.approved")
    # The answer's text arrived in more than one piece, before its step completed, and the
    # pieces make up the answer.
    answer_step = next(
        i.step_id
        for i in reversed(items)
        if i.type == "step.completed" and i.data["type"] == "model_call"
    )
    pieces = [i for i in items if i.kind == "text" and i.step_id == answer_step]
    assert len(pieces) > 1
    assert "".join(p.text or "" for p in pieces) == items[-1].data["answer"]


async def watch_live_and_late(client, pool, settings, home, run_id):
    """One watcher (the CLI) from the start, one (the client iterator) from the approval."""
    cli = await watch_cli(settings, home, run_id)
    pending = await wait_pending(client, run_id)
    late = asyncio.create_task(follow(client, pool, run_id))  # joins at the gate
    await asyncio.sleep(0.5)
    await ops.approve(client, run_id, by="li", role="approver")
    code, items = await cli
    return code, items, await late, pending


async def test_watching_an_ended_run_prints_its_story_from_the_mirror(
    client, settings, pool, worker, tmp_path
):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="li", role="approver")
        await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    # No worker now: the story comes from Postgres alone.
    result = await run_cli(settings, tmp_path, "watch", started.run_id, "--json")
    assert result.code == 0, result.err
    items = [json.loads(line) for line in result.out.splitlines()]
    assert all(i["offset"] is None for i in items)
    assert items[0]["type"] == "run.started" and items[-1]["kind"] == "receipt"
    text = await run_cli(settings, tmp_path, "watch", started.run_id)
    assert "run.finished" in text.out and "receipt: completed" in text.out
    decide = f"decide: agentledger approve {started.run_id} --by NAME --role approver"
    assert decide in text.out


async def test_watch_refuses_unknown_runs_and_bad_offsets(client, settings, tmp_path):
    result = await run_cli(settings, tmp_path, "watch", "run-nope", "--json")
    assert result.code == 3 and "no run 'run-nope'" in result.err
    result = await run_cli(settings, tmp_path, "watch", "run-nope", "--from", "-1")
    assert result.code == 2 and "--from" in result.err


async def test_a_watcher_follows_across_continue_as_new_within_the_history_bound(
    client, settings, pool, worker
):
    calls = [[("search_notes", {"query": f"refund {i}"})] for i in range(12)]
    answer = "## Summary\nDone: searched the notes twelve times and found the refund policy."
    # Each search an activity of its own: twelve local ones fit under the limit.
    spec = make_spec(
        "search a lot",
        allowed_tools=["search_notes"],
        history_events_limit=100,
        local_read_only_tools=False,
    )
    with OfflineModelServer(scripted(*calls, answer), stream_pause_seconds=0.05) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            items = await follow(client, pool, started.run_id)
    check_story(items)
    events = [i for i in items if i.kind == "event"]
    mirrored = await rows(pool, "SELECT seq FROM events WHERE run_id = %s", started.run_id)
    assert len(events) == len(mirrored)
    assert "run.continued_as_new" in [e.type for e in events]
    text = "".join(i.text or "" for i in items if i.kind == "text")
    assert text == answer  # the only reply with text, streamed whole across the generations

    generations = [run async for run in client.list_workflows(f"WorkflowId = '{started.run_id}'")]
    assert len(generations) >= 2
    lengths, signals, carried = [], 0, []
    for run in generations:
        history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        lengths.append(len(history.events))
        signals += sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and e.workflow_execution_signaled_event_attributes.signal_name
            == "__temporal_workflow_stream_publish"
        )
        started_event = history.events[0].workflow_execution_started_event_attributes
        [spec_in] = await client.data_converter.decode(started_event.input.payloads, [RunInput])
        if spec_in.carry is not None:
            carried.append(spec_in.carry.stream_state)
    # Each generation ends within one step of the limit, watcher polls included.
    assert max(lengths) <= spec.history_events_limit + STEP_EVENTS_WITH_A_WATCHER, lengths
    # Model text goes to watchers over Postgres: not one signal in any generation's history.
    assert signals == 0
    # What a continuation carries of the stream is its tail, never more.
    assert carried and all(
        state is not None and len(state.log) <= RETAINED_ITEMS for state in carried
    )


async def test_a_watcher_outlives_a_worker_crash(client, settings, pool, worker):
    """The worker dies (SIGKILL) mid-run; the watcher carries on with the next worker, which
    rebuilds the stream from history, and follows the run to its receipt."""
    doomed = await start_worker_process(settings, "doomed", faults="tool.after_effect:send_message")
    try:
        spec = make_spec(timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2})
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        watcher = asyncio.create_task(follow(client, pool, started.run_id))
        await wait_pending(client, started.run_id, seconds=60)
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
    async with worker():
        items = await asyncio.wait_for(watcher, 90)
        again = await follow(client, pool, started.run_id, from_offset=0)
    check_story(items)
    # After the run closed, `again` read the mirror; the live watcher's events match it.
    assert [(i.seq, i.type) for i in items if i.seq is not None] == [
        (i.seq, i.type) for i in again if i.kind == "event"
    ]
    assert "step.completed" in [i.type for i in items if i.step_id and "tool_call" in i.step_id]
    # The send's second attempt said why it was needed: the first one's worker died.
    [retry] = [i for i in items if i.type == "step.retry"]
    assert retry.data["attempt"] == 2
    assert "lost: its worker stopped before reporting" in retry.data["reason"]


async def test_watching_a_run_no_worker_serves_says_so(client, settings, pool, tmp_path):
    """No worker: the stream cannot answer; within a bound, watch says what it waits for (the
    mirror is migrated, as any deployment's is: watch reads the model's text from it)."""
    started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(tmp_path),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "watch",
        started.run_id,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 40)
        while line and not line.startswith(b"note:"):  # warnings from libraries first
            line = await asyncio.wait_for(proc.stderr.readline(), 40)
        assert b"is one running? (`" in line and b"agentledger-worker --demo`" in line, line
    finally:
        proc.kill()
        await proc.wait()
        await client.get_workflow_handle(started.run_id).terminate("test over")


async def test_a_retried_step_says_why_on_the_stream(client, settings, pool, worker):
    calls = 0

    def fails_once(request):
        nonlocal calls
        calls += 1
        if calls == 1:
            return Reply({"error": {"message": "the provider is overloaded"}}, status=503)
        return offline_planner(request)

    spec = make_spec("Look up our refund policy.")
    with OfflineModelServer(fails_once) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            items = await follow(client, pool, started.run_id)
    check_story(items)
    [retry] = [i for i in items if i.type == "step.retry"]
    assert retry.step_id == "0001-model_call" and retry.data["attempt"] == 2
    assert retry.data["reason"].startswith("attempt 1 failed: ")
    assert "overloaded" in retry.data["reason"]


PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"


async def stream_signals_and_model_results(client, run_id) -> tuple[int, list[ModelCallResult]]:
    """How many stream signals a run's history holds, and its model calls' results."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    signals, scheduled, results = 0, set(), []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            signals += e.workflow_execution_signaled_event_attributes.signal_name == PUBLISH_SIGNAL
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = e.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == ACTIVITY_MODEL_COMPLETE:
                scheduled.add(e.event_id)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = e.activity_task_completed_event_attributes
            if completed.scheduled_event_id in scheduled:
                [result] = await client.data_converter.decode(
                    completed.result.payloads, [ModelCallResult]
                )
                results.append(result)
    return signals, results


def answer_pieces(items: list[WatchItem]) -> list[WatchItem]:
    """The text pieces of the run's last model call, checked to come before its step ends."""
    step = next(
        i.step_id
        for i in reversed(items)
        if i.type == "step.completed" and i.data["type"] == "model_call"
    )
    pieces = [n for n, i in enumerate(items) if i.kind == "text" and i.step_id == step]
    done = next(n for n, i in enumerate(items) if i.type == "step.completed" and i.step_id == step)
    assert pieces and max(pieces) < done
    return [items[n] for n in pieces]


async def search_then_answer(
    client, settings, pool, worker, answer, *, pause, worker_settings=None
):
    """A run that searches the notes once and then gives `answer`, streamed with `pause`
    between its pieces, followed from its start: its id, its items (each with when it came),
    the model's requests."""
    spec = make_spec("Look up our refund policy.", allowed_tools=["search_notes"])
    search = [("search_notes", {"query": "refund"})]
    with OfflineModelServer(scripted(search, answer), stream_pause_seconds=pause) as model:
        async with worker(settings=worker_settings or settings, base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            came: list[tuple[float, WatchItem]] = []
            async for item in watch.watch(client, started.run_id, pool=pool):
                came.append((time.monotonic(), item))
        return started.run_id, came, model.requests


async def test_a_quick_reply_reaches_watchers_whole_without_a_signal(
    client, settings, pool, worker
):
    """A reply that comes at once reaches watchers whole, from Postgres: the run's history
    has no stream signal, and the call's result says the activity sent it all itself."""
    answer = "## Summary\nRefunds are paid within five working days of the request."
    run_id, came, _ = await search_then_answer(client, settings, pool, worker, answer, pause=0)
    items = [item for _, item in came]
    check_story(items)
    pieces = answer_pieces(items)
    assert "".join(p.text or "" for p in pieces) == answer
    assert all(p.data == {"attempt": 1} for p in pieces)
    signals, results = await stream_signals_and_model_results(client, run_id)
    assert signals == 0
    assert [r.streamed_chars for r in results] == [None, None]


async def test_a_slow_reply_streams_to_watchers_during_the_call(client, settings, pool, worker):
    """A reply that streams for about two seconds reaches the watcher in pieces while the
    provider is still sending, whole and in order, with no signal to the run."""
    answer = "## Summary\n" + " ".join(f"Note {i}: refunds take five days." for i in range(16))
    run_id, came, _ = await search_then_answer(client, settings, pool, worker, answer, pause=0.05)
    items = [item for _, item in came]
    check_story(items)
    pieces = answer_pieces(items)
    assert len(pieces) >= 2 and "".join(p.text or "" for p in pieces) == answer
    first = next(at for at, item in came if item is pieces[0])
    last = next(at for at, item in came if item is pieces[-1])
    assert last - first > 0.5, "the first piece came while the provider was still sending"
    signals, _ = await stream_signals_and_model_results(client, run_id)
    assert signals == 0


async def test_a_reply_past_the_budget_is_cut_with_a_note(client, settings, pool, worker):
    answer = "## Summary\n" + "Refunds take five working days. " * 1_100
    _, came, _ = await search_then_answer(client, settings, pool, worker, answer, pause=0)
    items = [item for _, item in came]
    text = "".join(p.text or "" for p in answer_pieces(items))
    dropped = len(answer) - MAX_STREAMED_CHARS
    assert dropped > 0
    assert text == answer[:MAX_STREAMED_CHARS] + (
        f"\n[{dropped:,} more characters not streamed; the step has them all]"
    )
    assert items[-1].data["answer"] == answer  # the step itself has it all


async def test_without_provider_streaming_watchers_get_each_reply_when_its_step_ends(
    client, settings, pool, worker
):
    """AGENTLEDGER_MODEL_STREAM=0: the provider answers whole, and so the activity sends it."""
    answer = "## Summary\nRefunds are paid within five working days of the request."
    whole = settings.model_copy(update={"model_stream": False})
    run_id, came, requests = await search_then_answer(
        client, settings, pool, worker, answer, pause=0, worker_settings=whole
    )
    items = [item for _, item in came]
    assert not any(r.get("stream") for r in requests)
    check_story(items)
    assert [p.text for p in answer_pieces(items)] == [answer]
    signals, _ = await stream_signals_and_model_results(client, run_id)
    assert signals == 0


async def test_a_reply_reused_after_a_crash_reaches_watchers_with_its_attempt(
    client, settings, pool, worker
):
    """The worker dies once the model has answered (journaled, not returned); the next
    attempt reuses the journaled reply and sends it whole as its own text, marked with the
    attempt that returned it."""
    answer = "## Summary\nRefunds are paid within five working days of the request."
    with OfflineModelServer(scripted(answer)) as model:
        spec = make_spec(
            "Look up our refund policy.", allowed_tools=["search_notes"], timeouts=FAST
        )
        run_id = await start_and_crash(client, settings, model, spec, "model.after_response")
        async with worker(base_url=model.base_url):
            items = await asyncio.wait_for(follow(client, pool, run_id), 90)
        assert len(model.requests) == 1, "the second attempt reused the journaled reply"
    check_story(items)
    reused = [p.text for p in answer_pieces(items) if p.data["attempt"] == 2]
    assert "".join(reused) == answer == text_of(items, "0001-model_call")


async def test_a_run_that_ends_while_no_worker_can_replay_it_ends_its_story_from_the_mirror(
    client, settings, pool, worker
):
    """An ended run's last stream items are read from a replay, which needs a worker. With
    none left to answer, the watcher still ends with every event, from the mirror."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        following = watch.watch(client, started.run_id, pool=pool)
        items = []
        async for item in following:  # then held: no poll while the run goes on
            items.append(item)
            if item.type == "approval.requested":
                break
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await ops.result(client, started.run_id)).status.value == "completed"
    items += [item async for item in following]
    check_story(items)
    assert any(i.offset is None for i in items if i.kind == "event"), "some came from the mirror"
