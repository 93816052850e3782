"""A deliberately non-deterministic edit of the run workflow, for the replay test to catch.

It lives in its own importable module (not a test module) so the workflow sandbox can load it.
Registered under the same workflow name, it waits on a timer before the original logic: an
edit that is harmless for new runs and breaks every run already in flight.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core._state import RunInput
    from agentledger.core.results import RunResult
    from agentledger.workflows.agent_run import AgentRunWorkflow


@workflow.defn(name=names.WORKFLOW_NAME)
class PlantedAgentRun(AgentRunWorkflow):
    @workflow.run
    async def run(self, spec: RunInput) -> RunResult:
        await workflow.sleep(timedelta(milliseconds=1))
        return await super().run(spec)
