"""Sub-agents as child runs, on the real stack.

A parent whose profile lists two sub-agents delegates to both through their `agent__NAME`
tools: each is a child run with its own receipt, linked both ways, whose answer the parent's
model reads. The parent's budget covers its children: a child given what is left fails when
it overspends, the parent's model hears it as a tool error, and the parent's own budget then
stops it. Cancelling the parent cancels the child it waits for; pausing and resuming it
reaches the child, and an approval the child waits for shows in the parent's status and watch.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from agentledger.cli import render
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.profiles import Agent
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.client_ops import watch
from tests.support import eventually, make_spec, rows, wait_pending

PARENT_TASK = "Ask both helpers and report."
LEAD = Agent(name="lead", instructions="You lead.", subagents=["alpha", "beta"])
AGENTS = {
    "lead": LEAD,
    "alpha": Agent(name="alpha", instructions="You are alpha."),
    "beta": Agent(name="beta", instructions="You are beta."),
}


def delegating_model(slow_children: float = 0.0) -> Any:
    """The parent delegates to both helpers, then reports what they said (or what failed);
    a helper answers its task."""

    def respond(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        tools = {t["function"]["name"] for t in request.get("tools", [])}
        if task == PARENT_TASK:
            results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
            if not results:
                assert {"agent__alpha", "agent__beta"} <= tools, tools
                calls = [
                    ("agent__alpha", {"task": "alpha job"}),
                    ("agent__beta", {"task": "beta job"}),
                ]
                return completion(request, tool_calls=calls)
            said = "; ".join(r.get("answer") or r.get("error", "") for r in results)
            return completion(request, content=f"## Summary\n{said}")
        if any(t.startswith("agent__") for t in tools):
            return completion(request, content="## Summary\na helper was offered sub-agents")
        reply = completion(request, content=f"## Summary\n{task} done")
        reply.delay_seconds = slow_children
        return reply

    return respond


def parent_spec(**fields: Any) -> Any:
    base = LEAD.spec(PARENT_TASK, agents=AGENTS)
    return make_spec(PARENT_TASK, **{**base.model_dump(exclude={"task"}), **fields})


async def test_a_parent_with_two_subagents_completes_with_both_receipts_linked(
    client, settings, pool, worker
):
    with OfflineModelServer(delegating_model()) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, parent_spec(), task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed"
    assert (
        result.answer
        == "## Summary\nSummary\nalpha job done; ## Summary\nbeta job done".replace(
            "Summary\nSummary", "Summary\n## Summary"
        )
    )
    receipt = await ops.receipt(pool, started.run_id)
    children = receipt["children"]
    assert len(children) == 2 and receipt["parent_run_id"] is None
    spent = 0.0
    for child_id, agent in zip(children, ["alpha", "beta"], strict=True):
        child = await ops.receipt(pool, child_id)
        assert child["outcome"] == "completed" and child["agent"] == agent
        assert child["parent_run_id"] == started.run_id
        assert child["task"] == f"{agent} job"
        spent += child["cost_usd"]
    steps = [s for s in receipt["steps"] if s["name"].startswith("agent__")]
    assert [(s["name"], s["status"]) for s in steps] == [
        ("agent__alpha", "completed"),
        ("agent__beta", "completed"),
    ]
    own = sum(float(s["cost_usd"]) for s in await _model_steps(pool, started.run_id))
    assert receipt["cost_usd"] == pytest.approx(own + spent), "the children's spend is the parent's"


async def test_the_parents_budget_stops_a_child_that_overspends(client, settings, pool, worker):
    wordy = Agent(name="alpha", instructions="You are alpha. " + "Be thorough. " * 200)
    agents = {**AGENTS, "alpha": wordy}
    with OfflineModelServer(delegating_model()) as model:
        async with worker(base_url=model.base_url):
            spec = parent_spec(
                subagents=LEAD.spec_fields(agents)["subagents"], budget={"max_tokens": 400}
            )
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id, seconds=60)
            assert pending.kind == "budget", pending
            state = await ops.status(client, started.run_id)
            # A person extends the parent's budget: it goes on, and its model hears why alpha
            # failed.
            edit = {"max_tokens": 100_000}
            await ops.approve(client, started.run_id, by="li", role="approver", edit=edit)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed"
    [alpha_id, *_] = (await ops.receipt(pool, started.run_id))["children"]
    alpha = await ops.receipt(pool, alpha_id)
    assert alpha["outcome"] == "failed" and "budget" in alpha["error"], alpha["error"]
    # Temporal shows the child Failed too; its parent still read its result.
    described = await client.get_workflow_handle(alpha_id).describe()
    assert described.status == WorkflowExecutionStatus.FAILED
    failed = [s for s in state.steps if s.name == "agent__alpha"]
    assert [s.status for s in failed] == ["failed"]
    # The parent's model heard the failure as the tool's error.
    heard = [
        json.loads(m["content"])
        for r in model.requests
        for m in r["messages"]
        if m["role"] == "tool"
    ]
    assert any("budget" in h.get("error", "") for h in heard), heard


async def test_cancelling_the_parent_cancels_its_child(client, settings, pool, worker):
    with OfflineModelServer(delegating_model(slow_children=30)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, parent_spec(), task_queue=settings.task_queue)
            state = await eventually(
                lambda: _waiting_for_child(client, started.run_id), what="a child to start"
            )
            await ops.cancel(client, started.run_id)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            [child_id] = (await ops.receipt(pool, started.run_id))["children"]

            async def child_cancelled() -> bool:
                described = await client.get_workflow_handle(child_id).describe()
                return described.status == WorkflowExecutionStatus.CANCELED

            await eventually(child_cancelled, what="the child to be cancelled")
    assert state.status.value == "waiting_for_tool"
    assert (await ops.receipt(pool, child_id))["outcome"] == "cancelled"


async def _waiting_for_child(client: Any, run_id: str) -> Any:
    state = await ops.status(client, run_id)
    return state if any(s.name.startswith("agent__") for s in state.steps) else None


async def _model_steps(pool: Any, run_id: str) -> list[dict[str, Any]]:
    return await rows(
        pool,
        "SELECT cost_usd FROM steps WHERE run_id = %s AND type IN ('model_call', 'verify')",
        run_id,
    )


def approving_child_model(slow_seconds: float) -> Any:
    """As `delegating_model`, but alpha first takes a slow model call that asks to send a
    message (an action that waits for approval), then reports it sent."""
    parent = delegating_model()

    def respond(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        if task != "alpha job":
            return parent(request)
        if not any(m["role"] == "tool" for m in messages):
            args = {"to": "ana@example.com", "subject": "Hi", "body": "Hello from alpha."}
            reply = completion(request, tool_calls=[("send_message", args)])
            reply.delay_seconds = slow_seconds
            return reply
        return completion(request, content="## Summary\nalpha job done\n## Actions\nsent it")

    return respond


async def test_pausing_the_parent_pauses_its_child_and_a_childs_approval_shows_in_the_parent(
    client, settings, pool, worker
):
    agents = {**AGENTS, "alpha": Agent(name="alpha", instructions="A.", tools=["send_message"])}
    spec = parent_spec(subagents=LEAD.spec_fields(agents)["subagents"])
    with OfflineModelServer(approving_child_model(slow_seconds=3)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            run_id = started.run_id
            seen = asyncio.ensure_future(_first_event(client, run_id, WAITING_EVENT))
            await eventually(lambda: _waiting_for_child(client, run_id), what="a child to start")
            [child_id] = (await ops.status(client, run_id)).children

            # The parent's pause reaches the child: it pauses at its next step boundary,
            # before the action its model asked for.
            await ops.control(client, run_id, "pause", by="li")

            async def child_paused() -> Any:
                state = await ops.status(client, child_id)
                return state if state.status.value == "paused" else None

            paused = await eventually(child_paused, what="the child to pause")
            assert paused.pause_requested and paused.pending_approval is None
            assert not seen.done(), "no approval is asked for while the child is paused"

            # The parent's resume reaches it too; its approval then shows in the parent's
            # status (with the run to decide it on) and in the parent's watch.
            await ops.control(client, run_id, "resume", by="li")
            pending = await wait_pending(client, child_id, seconds=60)
            shown = (await ops.status(client, run_id)).child_approvals
            assert [(a.run_id, a.approval.approval_id) for a in shown] == [
                (child_id, pending.approval_id)
            ]
            parent_state = await ops.status(client, run_id)
            assert parent_state.pending_approval is None
            assert f"agentledger approve {child_id} " in render.run_state(parent_state)
            event = await asyncio.wait_for(seen, 30)
            assert event.data["run_id"] == child_id
            assert event.data["approval_id"] == pending.approval_id
            assert event.data["tool"] == "send_message"

            await ops.approve(client, child_id, by="li", role="approver")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await handle.result()
            after = await ops.status(client, run_id)
    assert result.status.value == "completed"
    assert after.child_approvals == []
    child = await ops.receipt(pool, child_id)
    assert child["outcome"] == "completed" and [a["decision"] for a in child["approvals"]] == [
        "approved"
    ]
    events = await rows(
        pool, "SELECT type, data FROM events WHERE run_id = %s ORDER BY seq", run_id
    )
    types = [e["type"] for e in events]
    assert types.index(WAITING_EVENT) < types.index("subagent.approval_settled")
    child_events = [
        e["type"]
        for e in await rows(
            pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", child_id
        )
    ]
    assert child_events.index("run.paused") < child_events.index("run.resumed")
    assert child_events.index("run.resumed") < child_events.index("approval.requested")


WAITING_EVENT = "subagent.waiting_for_approval"


async def _first_event(client: Any, run_id: str, type_: str) -> Any:
    async for item in watch(client, run_id):
        if item.type == type_:
            return item
    raise AssertionError(f"{run_id} ended without a {type_} event")


async def test_a_pause_sent_with_no_worker_up_reaches_the_child_when_one_returns(
    client, settings, pool, worker
):
    agents = {**AGENTS, "alpha": Agent(name="alpha", instructions="A.", tools=["send_message"])}
    spec = parent_spec(subagents=LEAD.spec_fields(agents)["subagents"])
    with OfflineModelServer(approving_child_model(slow_seconds=0)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            run_id = started.run_id

            async def child_approval() -> Any:
                return (await ops.status(client, run_id)).child_approvals

            [waiting] = await eventually(child_approval, seconds=60, what="a child's approval")

        # No worker: status reads the mirror, which shows the child's approval as well.
        async def mirrored() -> Any:  # the child's own mirror write may trail its query
            report = await ops.inspect(client, run_id, wait=2, mirror=pool)
            assert report.source == "mirror"
            return report.state.child_approvals

        assert await eventually(mirrored, what="the mirror to show the child's approval") == [
            waiting
        ]
        # The pause goes as a signal the parent keeps in its history.
        control = await ops.control(client, run_id, "pause", by="li", wait=2)
        assert control.paused and "no worker answered" in control.message, control.message
        async with worker(base_url=model.base_url):
            # The new worker's first answer can trail the old one's sticky queue.
            await wait_pending(client, waiting.run_id, seconds=60)
            await ops.approve(client, waiting.run_id, by="li", role="approver")

            async def child_paused() -> Any:
                state = await ops.status(client, waiting.run_id)
                return state if state.status.value == "paused" else None

            paused = await eventually(child_paused, seconds=60, what="the child to pause")
            await ops.control(client, run_id, "resume", by="li")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await handle.result()
    assert paused.pending_approval is None and paused.pause_requested
    assert result.status.value == "completed"
    assert (await ops.receipt(pool, waiting.run_id))["outcome"] == "completed"
