"""AgentEval: one workflow per eval runs its cases, each as a child run of the candidate.

A case's run is started by `run_agent` (its tenant's policy read first, its id derived from
the eval's and the case's key), so a worker that dies mid-eval loses nothing: Temporal
resumes the eval and each case's run where they were, and no case starts twice. Beside the
run, an activity watches for its divergence (`eval.diverged`): the run, paused where it
called what its recording lacks, is then cancelled, so the case stops there. At most
`concurrency` cases run at once. The eval keeps only counts and the cases in flight, and
continues as new after each batch (200 cases, about ten events each), so an eval of
thousands of cases keeps a short history.
What each case did is read from the mirror by the client (agentledger.client.eval_runs).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from agentledger.workflows.child_runs import child_run_id, run_agent

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.evals import EvalActivities
    from agentledger.core import constants as names
    from agentledger.core.eval_cases import (
        EvalCaseTask,
        EvalProgress,
        EvalWorkflowInput,
        case_key,
    )

# The divergence watch heartbeats: a dead worker's watch moves on after this, and is tried
# again until the case's run ends, when the eval cancels it.
WATCH_HEARTBEAT = timedelta(seconds=10)
WATCH_TIMEOUT = timedelta(days=7)
WATCH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)


@workflow.defn(name=names.EVAL_WORKFLOW_NAME)
class EvalWorkflow:
    def __init__(self) -> None:
        self._done = 0
        self._total = 0
        self._running: set[str] = set()

    @workflow.run
    async def run(self, input: EvalWorkflowInput) -> EvalProgress:
        self._done, self._total = input.done, input.total
        batch, rest = input.cases[: input.batch], input.cases[input.batch :]
        started = []
        for case in batch:
            await workflow.wait_condition(lambda: len(self._running) < input.concurrency)
            self._running.add(case.name)
            started.append(asyncio.create_task(self._case(input, case)))
        await asyncio.gather(*started)
        if rest:
            workflow.continue_as_new(input.model_copy(update={"cases": rest, "done": self._done}))
        return self.progress()

    async def _case(self, input: EvalWorkflowInput, case: EvalCaseTask) -> None:
        """The case's run, to its end, or to its divergence (then cancelled there); a refused
        start fails the eval (no case could run)."""
        key = case_key(input.eval_id, case.name)
        try:
            run = asyncio.create_task(
                run_agent(input.candidate.model_copy(update={"task": case.task}), key=key)
            )
            watch = workflow.start_activity_method(
                EvalActivities.diverged,
                child_run_id(workflow.info().workflow_id, key),
                start_to_close_timeout=WATCH_TIMEOUT,
                heartbeat_timeout=WATCH_HEARTBEAT,
                retry_policy=WATCH_RETRY,
                # Ended before the eval goes on: it ends itself once the mirror shows the run
                # ended, and no watch is left open when the eval continues as new.
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
            await workflow.wait([run, watch], return_when=asyncio.FIRST_COMPLETED)
            if run.done():
                watch.cancel()
            (verdict,) = await asyncio.gather(watch, return_exceptions=True)
            diverged = verdict is True and not run.done()
            if diverged:  # the case stops there
                run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                if not diverged:
                    raise  # the eval itself was cancelled, not the case
        finally:
            self._running.discard(case.name)
            self._done += 1

    @workflow.query(name=names.QUERY_EVAL_PROGRESS)
    def progress(self) -> EvalProgress:
        return EvalProgress(done=self._done, total=self._total, running=sorted(self._running))
