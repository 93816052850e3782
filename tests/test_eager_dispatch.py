"""A step's tool call, and its model call, start in the reply to the workflow task that
scheduled them.

Dispatched eagerly, an activity skips the Temporal server's matching and one write of the
run's state, the server's costliest unit of work (docs/bench/history.md). A run's model calls
go to its own queue too (generation 6), unless its tenant has a model-call rate: then they
go to the model queue (agentledger.core.fairness), through matching, where the server holds
the tenant to its rate. The worker's slots are shared so the run queue has room for them
(`slot_shares`).
"""

from __future__ import annotations

import uuid

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


async def work_of_one_run(client, settings, worker, tenant: str, **fields) -> dict[str, float]:
    """The server's work for one run of three tool calls (two model calls) of `tenant`."""
    tool_calls = [("search_notes", {"query": f"refunds {i}"}) for i in range(3)]
    metrics = f"http://127.0.0.1:{SERVER_METRICS_PORT}/metrics"
    with OfflineModelServer(scripted(tool_calls, SUMMARY)) as model:
        async with worker(base_url=model.base_url) as running:
            [run_slots, model_slots, _] = [
                w.config()["max_concurrent_activities"] for w in running.workers
            ]
            assert run_slots > model_slots
            spec = make_spec(
                "Search the notes.", tenant=tenant, allowed_tools=["search_notes"], **fields
            )
            before = server_work.scrape(metrics)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            after = server_work.scrape(metrics)
    assert result.status == RunStatus.COMPLETED
    work = server_work.per_step(before, after, 1)
    assert work is not None
    return work


async def test_a_runs_tool_and_model_calls_start_eagerly(client, settings, worker):
    # Its read-only tool as an activity of its own (a new run's would be a local activity,
    # no task on the server at all: tests/test_local_read_only_tools.py).
    work = await work_of_one_run(client, settings, worker, "default", local_read_only_tools=False)
    # Two model calls, three tool calls and the receipt's write completed; none went through
    # matching but, at most, the receipt's write (eager too, where a slot is free).
    assert work["activities"] >= 6
    assert work["activities_through_matching"] <= 1


async def test_a_rated_tenants_model_calls_go_through_matching(client, settings, pool, worker):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    await ops.set_tenant(
        client, pool, tenant, {"model_calls_per_second": 50.0}, task_queue=settings.task_queue
    )
    work = await work_of_one_run(client, settings, worker, tenant)
    # The run started without its tenant's policy (`ops.start_run`): its first model call,
    # on its own queue, was refused for the rate and made again on the model queue, and so
    # was the second; both went through matching, where the rate holds.
    assert 2 <= work["activities_through_matching"] <= 3
