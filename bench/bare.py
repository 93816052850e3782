"""Bare Temporal: a workflow that calls N no-op activities, nothing else.

It is the floor our engine is compared with: same server, same worker settings, same data
converter, no mirror, no model, no tools. It lives in an importable module because Temporal's
sandbox refuses workflows defined in `__main__`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

BARE_WORKFLOW = "BenchBare"
BARE_ACTIVITY = "bench.noop"


@activity.defn(name=BARE_ACTIVITY)
async def noop(step: int) -> int:
    return step


@workflow.defn(name=BARE_WORKFLOW)
class BareWorkflow:
    @workflow.run
    async def run(self, steps: int) -> int:
        done = 0
        for step in range(steps):
            done += 1 + await workflow.execute_activity(
                noop, step, start_to_close_timeout=timedelta(seconds=30)
            )
        return done
