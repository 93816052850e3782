"""Decisions on a sub-agent's run answered as the run recorded them (issue 35, item 2), on
the real stack.

A decision on a child's run answers what the run recorded ("approved", "rejected"),
never "abandoned" as it did when the parent was told before the decision was recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentrun.client_api import RunClient
from agentrun.core.settings import Settings
from agentrun.dev.offline_model import OfflineModelServer
from agentrun.ops import operations as ops
from agentrun.profiles import Agent
from agentrun.workflows import AgentRunWorkflow
from tests.support import eventually
from tests.test_door import cli
from tests.test_subagents import AGENTS, LEAD, approving_child_model, parent_spec

SENDER = {**AGENTS, "alpha": Agent(name="alpha", instructions="A.", tools=["send_message"])}


async def _child_waiting(client, run_id: str) -> str:
    """The id of the sub-agent run that waits for an approval under `run_id`."""

    async def waiting() -> str | None:
        shown = (await ops.status(client, run_id)).child_approvals
        return shown[0].run_id if shown else None

    return await eventually(waiting, seconds=60, what="the child's approval in its parent")


async def test_a_decision_on_a_childs_run_answers_what_it_recorded(
    client, settings: Settings, pool, worker, tmp_path: Path
):
    """Through the CLI: `reject` of a child's run answers "rejected"."""
    spec = parent_spec(subagents=LEAD.spec_fields(SENDER)["subagents"])
    with OfflineModelServer(approving_child_model(slow_seconds=0)) as model:
        async with worker(base_url=model.base_url):
            runs = RunClient(client, settings)
            try:
                parent = (await runs.start_run(spec)).run_id
            finally:
                await runs.close()
            child = await _child_waiting(client, parent)
            rejected = await cli(
                settings, tmp_path, None,
                "reject", child, "--by", "li", "--role", "approver", "--reason", "no", "--json",
            )  # fmt: skip
            assert rejected.code == 0, rejected
            assert json.loads(rejected.out)["decision"] == "rejected", rejected.out
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, parent)
            assert (await handle.result()).status.value == "completed"
    receipt = await ops.receipt(pool, child)
    assert [a["decision"] for a in receipt["approvals"]] == ["rejected"]
