"""Double-texting (issue 50): a message said to a session while a long turn is in flight.

On the real stack, one session per policy, each with a slow model call in flight when the
second message comes: `reject` refuses it (OperationRefused, 409 over HTTP) and the turn
answers as if nothing was said; `enqueue` keeps it for the next turn (and a keyed start of
the same session with another task is said to it likewise); `interrupt` ends the turn at its
next step boundary with its work kept, and the message's turn reads that work; `rollback`
after a side effect cancels the model call in flight and forgets the turn: the next turn
reads none of it, is told of the effect, which stands and is not made again, and the
receipt names it as kept. A policy the tenant does not let a message ask for is refused.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import OperationRefused
from agentledger.core.results import RunState
from agentledger.dev.offline_model import OfflineModelServer, Reply, offline_planner
from agentledger.workflows import AgentRunWorkflow
from tests.recorded import replayer
from tests.support import eventually, make_spec, rows

SLOW = 5.0
ASK = "What is our refund policy?"


def ticket() -> dict[str, str]:
    """A ticket of its own for each test: its title tells its rows apart."""
    return {"title": f"Refund {uuid.uuid4().hex[:8]}", "body": "Please refund order 42."}


def filing(ticket: dict[str, str]) -> str:
    return f"call create_ticket {json.dumps(ticket)}"


def slowed(when: Any) -> Any:
    """The offline planner, slow on the calls `when` picks out."""

    def respond(request: dict[str, Any]) -> Reply:
        reply = offline_planner(request)
        if when(request["messages"]):
            reply.delay_seconds = SLOW
        return reply

    return respond


def first_call(messages: list[dict[str, Any]]) -> bool:
    return len(messages) == 2  # the system message and the task: the session's first call


def after_ticket(messages: list[dict[str, Any]]) -> bool:
    return messages[-1]["role"] == "tool" and "ticket_id" in str(messages[-1]["content"])


def session(policy: str, task: str, tools: list[str]) -> Any:
    return make_spec(
        task,
        allowed_tools=tools,
        session={"idle_timeout": 600},
        double_texting=policy,
        timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2},
    )


async def state_of(runs: RunClient, run_id: str) -> RunState:
    return await runs.runs.status(run_id)


async def in_flight(runs: RunClient, run_id: str) -> None:
    """Until the session's model call is in flight."""

    async def probe() -> bool:
        state = await state_of(runs, run_id)
        return any(s.type == "model_call" and s.status == "running" for s in state.steps)

    await eventually(probe, what="a model call in flight")


async def answered(runs: RunClient, run_id: str, turns: int) -> RunState:
    """Until the session is idle after `turns` turns (answered or cut short)."""

    async def probe() -> RunState | None:
        state = await state_of(runs, run_id)
        done = [t for t in state.turns if t.answered_at is not None or t.ended is not None]
        idle = state.status.value == "waiting_for_message"
        return state if idle and len(done) >= turns else None

    return await eventually(probe, seconds=60, what=f"{turns} turn(s) over")


async def ended(client: Client, runs: RunClient, run_id: str) -> dict[str, Any]:
    """End the session, replay its history, and return its receipt."""
    await runs.sessions.end(run_id)
    handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
    await handle.result()
    await replayer([AgentRunWorkflow]).replay_workflow(await handle.fetch_history())
    return (await runs.runs.receipt(run_id)).model_dump(mode="json")


@pytest.fixture
async def tenant(client: Client, settings: AgentLedgerConfig):
    name = f"dt-{uuid.uuid4().hex[:8]}"
    async with RunClient(client, settings) as operator:
        yield operator, operator.acting_for(name), name


async def test_reject_refuses_a_message_while_the_turn_is_in_flight(tenant, client, worker):
    operator, runs, name = tenant
    with OfflineModelServer(slowed(first_call)) as model:
        async with worker(base_url=model.base_url):
            started = await runs.runs.start(spec=session("reject", ASK, ["search_notes"]))
            await in_flight(runs, started.run_id)
            with pytest.raises(OperationRefused, match="double-texting: reject"):
                await runs.runs.say(started.run_id, "And exchanges?", by="ana")
            first = await answered(runs, started.run_id, 1)
            assert first.turns[0].message_ids == []
            said = await runs.runs.say(started.run_id, "And exchanges?", by="ana")
            assert said.delivered == "accepted"
            await answered(runs, started.run_id, 2)
            # The tenant narrows what a message may ask for: an operator allows enqueue alone.
            await operator.tenants.set(name, {"double_texting": ["enqueue"]})
            with pytest.raises(OperationRefused, match="enqueue only, not rollback"):
                await runs.runs.say(started.run_id, "Drop it.", double_texting="rollback")
            receipt = await ended(client, runs, started.run_id)
    [refused, taken] = receipt["messages"]
    assert refused["rejected"] and refused["taken_at"] is None
    assert taken["rejected"] is None and taken["taken_at"] is not None


async def test_enqueue_keeps_the_message_and_a_keyed_start_for_the_next_turn(
    tenant, client, worker
):
    _, runs, _ = tenant
    with OfflineModelServer(slowed(first_call)) as model:
        async with worker(base_url=model.base_url):
            spec = session("enqueue", ASK, ["search_notes"])
            started = await runs.runs.start(spec=spec)
            await in_flight(runs, started.run_id)
            said = await runs.runs.say(started.run_id, "And exchanges?", by="ana")
            assert said.delivered == "accepted" and "next turn" in said.note
            # The same key with another task: said to the session too, once however often.
            again = spec.model_copy(update={"task": "And gift cards?"})
            keyed = [await runs.runs.start(spec=again) for _ in range(2)]
            assert {k.run_id for k in keyed} == {started.run_id}
            assert keyed[0].said is not None and keyed[0].said.delivered == "accepted"
            assert keyed[0].said.message_id == keyed[1].said.message_id
            state = await answered(runs, started.run_id, 2)
            assert state.turns[0].message_ids == [], "the turn in flight took neither"
            assert state.turns[1].message_ids == [said.message_id, keyed[0].said.message_id]
            assert [m.message_id for m in state.messages].count(keyed[0].said.message_id) == 1
            assert (await runs.runs.start(spec=spec)).said is None, "the first start again"
            await ended(client, runs, started.run_id)


async def test_interrupt_ends_the_turn_at_its_next_step_and_keeps_its_work(
    tenant, client, worker, pool
):
    _, runs, _ = tenant
    with OfflineModelServer(slowed(first_call)) as model:
        async with worker(base_url=model.base_url):
            asked = ticket()
            spec = session("interrupt", filing(asked), ["create_ticket", "search_notes"])
            started = await runs.runs.start(spec=spec)
            await in_flight(runs, started.run_id)
            said = await runs.runs.say(started.run_id, ASK, by="ana")
            assert "ends at its next step boundary" in said.note
            state = await answered(runs, started.run_id, 2)
            receipt = await ended(client, runs, started.run_id)
    first, second = state.turns
    assert first.ended == "interrupted" and first.answered_at is None
    assert second.ended == "answered" and second.message_ids == [said.message_id]
    # The slow call finished (its reply kept); the ticket it asked for was not filed.
    assert first.model_calls == 1 and receipt["side_effects"] == []
    assert not await rows(pool, "SELECT 1 FROM tickets WHERE title = %s", asked["title"])
    told = model.requests[-1]["messages"]
    assert any(m.get("tool_calls") for m in told), "the next turn reads the first turn's work"
    assert any("not run: the turn ended" in str(m.get("content")) for m in told)


async def test_rollback_after_a_side_effect_forgets_the_turn_and_keeps_the_effect(
    tenant, client, worker, pool
):
    _, runs, _ = tenant
    with OfflineModelServer(slowed(after_ticket)) as model:
        async with worker(base_url=model.base_url):
            asked = ticket()
            spec = session("rollback", filing(asked), ["create_ticket", "search_notes"])
            started = await runs.runs.start(spec=spec)

            async def filed() -> bool:
                steps = (await state_of(runs, started.run_id)).steps
                return any(s.name == "create_ticket" and s.status == "completed" for s in steps)

            await eventually(filed, what="the ticket filed")
            await in_flight(runs, started.run_id)  # the slow call after it
            said = await runs.runs.say(started.run_id, ASK, by="ana")
            assert "rolled back now" in said.note
            state = await answered(runs, started.run_id, 2)
            receipt = await ended(client, runs, started.run_id)
    first, second = state.turns
    assert first.ended == "rolled_back" and first.answer is None
    assert first.kept_effects == [
        f"create_ticket({json.dumps(asked, separators=(',', ':'), sort_keys=True)})"
    ]
    assert second.ended == "answered" and "## Summary" in (second.answer or "")
    # The model call in flight was cancelled, not waited for.
    interrupted = [s for s in receipt["steps"] if s["status"] == "interrupted"]
    assert len(interrupted) == 1
    # The next turn read none of the first, was told of the ticket, and filed no other.
    told = model.requests[-1]["messages"]
    assert asked["title"] not in json.dumps([m for m in told if m["role"] != "system"])
    assert any(
        m["role"] == "system" and "create_ticket" in m["content"] and "stand" in m["content"]
        for m in told
    )
    assert [e["tool"] for e in receipt["side_effects"]] == ["create_ticket"]
    assert len(await rows(pool, "SELECT 1 FROM tickets WHERE title = %s", asked["title"])) == 1
