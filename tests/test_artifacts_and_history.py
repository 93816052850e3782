"""Large outputs become artifacts, and the conversation lives in Postgres: history stays small."""

from __future__ import annotations

from pydantic import BaseModel

import agentledger.demo
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.artifacts import ArtifactStore
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, rows, scripted

SUMMARY = "## Summary\nDone."


class Size(BaseModel):
    kilobytes: int


async def dump(args: Size, ctx: ToolContext) -> dict[str, str]:
    return {"data": "x" * (args.kilobytes * 1024)}


REGISTRY = ToolRegistry(
    [*agentledger.demo.registry.tools(), Tool("dump", "produce a large output", Size, dump)]
)


async def history_bytes(client, run_id: str) -> int:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return len(history.to_json())


async def test_a_3_mb_tool_output_becomes_an_artifact(client, settings, pool, worker):
    with OfflineModelServer(scripted([("dump", {"kilobytes": 3 * 1024})], SUMMARY)) as model:
        async with worker(registry=REGISTRY, base_url=model.base_url):
            started = await ops.start_run(client, make_spec("dump"), task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            size = await history_bytes(client, started.run_id)
    assert result.status.value == "completed"
    assert size < 200_000, f"history is {size} bytes; the 3 MB output must not be in it"
    stored = await rows(
        pool,
        "SELECT artifact_id, size_bytes FROM artifacts WHERE run_id = %s AND name = 'dump.json'",
        started.run_id,
    )
    assert len(stored) == 1 and stored[0]["size_bytes"] > 3 * 1024 * 1024
    content = await ArtifactStore(pool).get(stored[0]["artifact_id"])
    assert content.startswith(b'{"data": "xxxx') and len(content) == stored[0]["size_bytes"]
    shown = model.requests[1]["messages"][-1]["content"]
    assert stored[0]["artifact_id"] in shown and len(shown) < 5000, "the model sees a reference"


async def test_history_grows_linearly_with_a_large_conversation(client, settings, pool, worker):
    """100 model calls over a conversation that grows to 2.4 MB: sending it whole with every
    call would write ~160 MB of history; storing it once keeps history under 10 MB."""
    calls = [[("dump", {"kilobytes": 24})] for _ in range(99)]
    with OfflineModelServer(scripted(*calls, SUMMARY)) as model:
        async with worker(registry=REGISTRY, base_url=model.base_url):
            spec = make_spec("dump a lot", max_steps=100)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            size = await history_bytes(client, started.run_id)
    assert result.status.value == "completed"
    assert len(model.requests) == 100
    conversation = sum(len(str(m)) for m in model.requests[-1]["messages"])
    assert conversation > 99 * 24 * 1024, "the model did see the whole conversation"
    assert size < 10 * 1024 * 1024, f"history is {size / 1e6:.1f} MB"
    stored = await rows(
        pool, "SELECT count(*) AS n FROM conversation WHERE run_id = %s", started.run_id
    )
    assert stored[0]["n"] == len(model.requests[-1]["messages"])


async def test_a_long_run_continues_as_new_and_its_receipt_stays_whole(
    client, settings, pool, worker
):
    calls = [[("search_notes", {"query": f"refund {i}"})] for i in range(12)]
    # Each search an activity of its own: twelve local ones fit under the limit.
    spec = make_spec(
        "search a lot",
        allowed_tools=["search_notes"],
        history_events_limit=100,
        local_read_only_tools=False,
    )
    with OfflineModelServer(scripted(*calls, SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            state = await ops.status(client, started.run_id)
    assert result.status.value == "completed"
    continued = await rows(
        pool,
        "SELECT data FROM events WHERE run_id = %s AND type = 'run.continued_as_new' ORDER BY seq",
        started.run_id,
    )
    assert len(continued) >= 1, "the run crossed its history limit"
    assert [c["data"]["generation"] for c in continued] == list(range(1, len(continued) + 1))

    # The conversation went on unbroken: the last call saw every tool result.
    last = model.requests[-1]["messages"]
    assert sum(1 for m in last if m["role"] == "tool") == 12
    # The receipt covers the whole chain: every step, every token.
    receipt = await ops.receipt(pool, started.run_id)
    assert [s["seq"] for s in receipt["steps"]] == list(range(1, len(receipt["steps"]) + 1))
    assert sum(1 for s in receipt["steps"] if s["type"] == "tool_call") == 12
    totals = await rows(
        pool,
        "SELECT sum(tokens_in) AS tin, count(*) AS n FROM steps WHERE run_id = %s",
        started.run_id,
    )
    assert totals[0]["tin"] == receipt["tokens_in"] and totals[0]["n"] == len(state.steps)
    events = await rows(
        pool, "SELECT seq FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "no gaps, no doubles"
