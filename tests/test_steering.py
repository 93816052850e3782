"""Steering: `agentledger say` adds a message to a run in flight, on the real stack.

A slow scripted model call stands for a model thinking: a message said meanwhile is read at
the next model call (on_message: queue), or cancels the call in flight (interrupt) and the
run replans with it. The message is kept with no worker running, and status, watch and the
receipt show it and when it was taken. A message to an ended or unknown run is refused.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentledger.core.errors import OperationRefused, RunNotFound
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests import client_ops as steering_ops
from tests import client_ops as watch
from tests.recorded import replayer
from tests.support import eventually, make_spec, rows
from tests.test_cli_exit_codes import agentledger, json_error

SAID = "Only look at the 2025 policy."
SLOW_SECONDS = 4.0


def steered_model(slow_first: float) -> Any:
    """A model whose first call takes `slow_first` seconds and asks for a search; once the
    conversation holds a person's message it answers naming it, else it answers plainly."""

    def respond(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        heard = [m["content"] for m in messages if m["role"] == "user"][1:]
        if heard:
            return completion(request, content=f"## Summary\nHeard: {heard[-1]}")
        if not any(m["role"] == "tool" for m in messages):
            reply = completion(request, tool_calls=[("search_notes", {"query": "refund"})])
            reply.delay_seconds = slow_first
            return reply
        return completion(request, content="## Summary\nNothing was said.")

    return respond


def said_in(request: dict[str, Any]) -> bool:
    return any(m["role"] == "user" and SAID in str(m["content"]) for m in request["messages"])


async def test_a_queued_message_is_read_at_the_next_model_call(client, settings, pool, worker):
    with OfflineModelServer(steered_model(SLOW_SECONDS)) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec("Summarize the refund policy.", allowed_tools=["search_notes"])
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            watched = asyncio.ensure_future(_watch(client, pool, started.run_id))
            await eventually(lambda: _requests(model), what="the slow model call to start")
            said = await steering_ops.say(client, started.run_id, SAID, by="ana")
            assert said.delivered == "accepted", said
            state = await ops.status(client, started.run_id)
            assert [m.text for m in state.messages] == [SAID]
            assert state.messages[0].taken_at is None, "not inside the model call in flight"
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            history = await handle.fetch_history()
    await replayer([AgentRunWorkflow]).replay_workflow(history)
    assert result.status.value == "completed"
    assert result.answer == f"## Summary\nHeard: Message from ana: {SAID}"
    # The slow call finished as it was; the tool ran; the next call read the message.
    assert [said_in(r) for r in model.requests] == [False, True]
    last = model.requests[-1]["messages"]
    assert last[-2]["role"] == "tool" and last[-1]["role"] == "user", "after the tool's result"
    receipt = await ops.receipt(pool, started.run_id)
    [message] = receipt["messages"]
    assert message["by"] == "ana" and message["text"] == SAID
    assert message["taken_before_step"] == 3 and message["interrupted_step"] is None
    assert message["received_at"] <= message["taken_at"]
    assert [s["status"] for s in receipt["steps"]][:3] == ["completed"] * 3
    events = await rows(
        pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    kinds = [e["type"] for e in events]
    assert kinds.index("message.received") < kinds.index("message.taken")
    live = await asyncio.wait_for(watched, 30)
    assert live.index("message.received") < live.index("receipt")
    story = await _watch(client, pool, started.run_id)  # an ended run's, from the mirror
    assert story.index("message.received") < story.index("message.taken") < story.index("receipt")


async def test_an_interrupting_message_cancels_the_model_call(client, settings, pool, worker):
    with OfflineModelServer(steered_model(SLOW_SECONDS)) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec(
                "Summarize the refund policy.",
                allowed_tools=["search_notes"],
                on_message="interrupt",
            )
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            await eventually(lambda: _requests(model), what="the slow model call to start")
            sent = time.monotonic()
            await steering_ops.say(client, started.run_id, SAID, by="ana")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            took = time.monotonic() - sent
    assert result.status.value == "completed"
    assert result.answer == f"## Summary\nHeard: Message from ana: {SAID}"
    assert took < SLOW_SECONDS, f"the run waited out the slow call ({took:.1f}s)"
    receipt = await ops.receipt(pool, started.run_id)
    steps = [(s["step_id"], s["status"]) for s in receipt["steps"]]
    assert steps[0] == ("0001-model_call", "interrupted")
    assert steps[1:] == [("0002-model_call", "completed"), ("0003-verify", "passed")]
    [message] = receipt["messages"]
    assert message["interrupted_step"] == "0001-model_call"
    assert message["taken_before_step"] == 2
    # Each response paid for is counted once: in the run's cost, or as unaccepted.
    # The slow call's attempt ends by itself once it hears of the cancel, or its response
    # arrives first and is journaled: either way it is counted once.
    await asyncio.sleep(SLOW_SECONDS)
    journal = await rows(
        pool, "SELECT step_id, cost_usd FROM model_journal WHERE run_id = %s", started.run_id
    )
    receipt = await ops.receipt(pool, started.run_id)
    accepted = sum(float(s["cost_usd"]) for s in await _steps(pool, started.run_id))
    assert receipt["cost_usd"] == pytest.approx(accepted)
    assert sum(float(j["cost_usd"]) for j in journal) == pytest.approx(
        receipt["cost_usd"] + receipt["unaccepted_cost_usd"]
    )
    mirrored = await _steps(pool, started.run_id)
    assert mirrored[0]["status"] == "interrupted" and float(mirrored[0]["cost_usd"]) == 0


async def test_a_message_is_kept_with_no_worker_running(client, settings, pool, worker, tmp_path):
    """Said through the command line while no worker runs; refused once the run has ended."""
    home = tmp_path / "home"
    with OfflineModelServer(steered_model(0)) as model:
        spec = make_spec("Summarize the refund policy.", allowed_tools=["search_notes"])
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        said = await agentledger(
            settings, home, "say", started.run_id, SAID, "--by", "ana", "--wait", "2", "--json"
        )
        assert said.code == 0, said.err
        assert said.json()["delivered"] == "recorded" and "no worker" in said.json()["note"]
        async with worker(base_url=model.base_url):
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.answer == f"## Summary\nHeard: Message from ana: {SAID}"
    assert said_in(model.requests[0]), "the first model call read it"
    [message] = (await ops.receipt(pool, started.run_id))["messages"]
    assert message["taken_before_step"] == 1
    late = await agentledger(settings, home, "say", started.run_id, "too late", "--json")
    assert "already ended" in json_error(late, 5, "refused")
    with pytest.raises(OperationRefused, match="already ended"):
        await steering_ops.say(client, started.run_id, "too late")
    with pytest.raises(RunNotFound):
        await steering_ops.say(client, "run-no-such-run", "anyone there?")


async def _watch(client: Any, pool: Any, run_id: str) -> list[str]:
    """What `agentledger watch` shows of the run: live while it runs, then its receipt."""
    return [item.type async for item in watch.watch(client, run_id, pool=pool)]


async def _requests(model: OfflineModelServer) -> bool:
    return bool(model.requests)


async def _steps(pool: Any, run_id: str) -> list[dict[str, Any]]:
    return await rows(
        pool, "SELECT step_id, status, cost_usd FROM steps WHERE run_id = %s ORDER BY seq", run_id
    )
