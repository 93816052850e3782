"""A step's tool call starts in the reply to the workflow task that scheduled it.

Dispatched eagerly, it skips the Temporal server's matching and one write of the run's
state, the server's costliest unit of work (docs/benchmarks.md). Only the model calls, on
a queue of their own (agentledger.core.fairness), go through matching. The worker's slots are
shared so the run queue has room for it (`slot_shares`).
"""

from __future__ import annotations

from agentledger.core.states import RunStatus
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.worker.worker_factory import slot_shares
from agentledger.workflows import AgentRunWorkflow
from bench import server_work
from tests import client_ops as ops
from tests.conftest import SERVER_METRICS_PORT
from tests.support import make_spec, scripted

SUMMARY = "## Summary\nThe notes were searched."


def test_the_run_queue_may_use_every_slot_but_the_mirror_writes_share() -> None:
    assert slot_shares(100) == (80, 40, 20)
    assert slot_shares(4) == (3, 1, 1)  # a fifth of 4 is less than one: the mirror keeps one
    assert slot_shares(1) == (1, 1, 1)
    for slots in range(1, 200):
        run, model, mirror = slot_shares(slots)
        assert run + mirror <= max(slots, 2) and model + mirror <= max(slots, 2)
        assert run >= model  # the steps' own tool calls never get the smaller share


async def test_a_runs_tool_calls_start_eagerly_and_only_its_model_calls_are_matched(
    client, settings, worker
):
    tool_calls = [("search_notes", {"query": f"refunds {i}"}) for i in range(3)]
    metrics = f"http://127.0.0.1:{SERVER_METRICS_PORT}/metrics"
    with OfflineModelServer(scripted(tool_calls, SUMMARY)) as model:
        async with worker(base_url=model.base_url) as running:
            [run_slots, model_slots, _] = [
                w.config()["max_concurrent_activities"] for w in running.workers
            ]
            assert run_slots > model_slots
            spec = make_spec("Search the notes.", allowed_tools=["search_notes"])
            before = server_work.scrape(metrics)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            after = server_work.scrape(metrics)
    assert result.status == RunStatus.COMPLETED
    work = server_work.per_step(before, after, 1)
    assert work is not None
    # Two model calls, three tool calls and the receipt's write completed; of them only the
    # two model calls went through matching (the receipt's write, eager too, may not be).
    assert work["activities"] >= 6
    assert 2 <= work["activities_through_matching"] <= 3
