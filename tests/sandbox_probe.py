"""Workflows for tests/test_sandbox_contexts.py, in a module of their own: the sandbox imports
a workflow's module afresh for each run, and this one imports nothing but the SDK."""

from __future__ import annotations

import datetime
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="probe.shout")
async def shout(text: str) -> str:
    return text.upper() + "!"


@workflow.defn(name="ProbeEcho")
class EchoWorkflow:
    """Payloads both ways: the run's input, an activity's input and result, the run's result."""

    @workflow.run
    async def run(self, text: str) -> str:
        loud = await workflow.execute_activity(
            shout, text, start_to_close_timeout=timedelta(seconds=10)
        )
        return f"{workflow.info().workflow_type}: {loud}"


@workflow.defn(name="ProbeClock")
class ClockWorkflow:
    """Reads the machine's clock, which workflow code must never do."""

    @workflow.run
    async def run(self) -> str:
        return datetime.datetime.now().isoformat()
