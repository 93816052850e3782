"""A worker that keeps fewer runs in memory than it serves still finishes them all exactly."""

from __future__ import annotations

import asyncio

import pytest

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, rows


def test_the_cache_setting_is_a_number_of_runs():
    assert AgentLedgerConfig.load({"AGENTLEDGER_WORKFLOW_CACHE": "50"}).workflow_cache == 50
    with pytest.raises(SetupError, match="AGENTLEDGER_WORKFLOW_CACHE"):
        AgentLedgerConfig.load({"AGENTLEDGER_WORKFLOW_CACHE": "-1"})


async def test_runs_beyond_the_cache_replay_and_finish(client, settings, pool, worker):
    small = settings.model_copy(update={"workflow_cache": 1})
    async with worker(settings=small) as workers:
        assert workers.workers[0].config()["max_cached_workflows"] == 1
        spec = make_spec("Summarize our invoice policy.", allowed_tools=["search_notes"])
        started = [
            await ops.start_run(client, spec, task_queue=settings.task_queue) for _ in range(4)
        ]
        results = await asyncio.wait_for(
            asyncio.gather(
                *(
                    client.get_workflow_handle_for(AgentRunWorkflow.run, s.run_id).result()
                    for s in started
                )
            ),
            90,
        )
    assert [r.status.value for r in results] == ["completed"] * 4
    for s in started:
        steps = await rows(
            pool, "SELECT type FROM steps WHERE run_id = %s AND final ORDER BY seq", s.run_id
        )
        assert [x["type"] for x in steps] == ["model_call", "tool_call", "model_call", "verify"]
