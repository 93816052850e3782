"""Every run its tenant's notification webhooks hear of gets its notifier, started where the
run records what they are told.

A run writes its events to the mirror; an approval asked is written as the run blocks on
it (`mirror.sync`), and its end with its receipt (`mirror.finish`). Those writes call
`RunNotices.written`, which starts the run's notifier (agentledger.workflows.run_notifier)
once the run has an event worth telling and its tenant has a notification webhook. So a run
is told of however it was started (a client's start, a fork, a backlog's task, a sub-agent,
a schedule's fire, `run_agent` in a workflow of your own): no entry point has to remember.
The notifier reads the run's events from its first on, so a decision a standing approval
made, written with the step it let run, is told too, before what follows it.

An eval case's run (agentledger.core.eval_cases) tells nobody: it replays a recording,
its approvals are decided by the eval command, and an eval of a thousand cases must not
page anyone a thousand times.

One notifier per run: its id is the run's, a start that finds it running joins it, and one
that finds it ended starts nothing (the run has been told). A write retried after its
notifier started starts nothing more.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from agentledger.core import fairness
from agentledger.core.constants import RUN_NOTIFIER_WORKFLOW_NAME
from agentledger.core.eval_cases import is_eval_run
from agentledger.core.notifications import TOLD
from agentledger.core.webhook_models import RunNotifierInput, run_notifier_id
from agentledger.core.wire import MirrorBatch
from agentledger.store.webhook_store import WebhookStore


class RunNotices:
    """Starts a run's notifier when a mirror write holds its first event worth telling."""

    def __init__(self, store: WebhookStore, client: Client) -> None:
        self.store = store
        self.client = client

    async def written(self, batch: MirrorBatch) -> None:
        """`batch` is in the mirror: start its run's notifier if it has something to tell
        and its tenant listens."""
        run = batch.run
        if not any(event.type in TOLD for event in batch.events) or is_eval_run(run.run_id):
            return
        if not await self.store.notifies(run.tenant):
            return
        try:
            await self.client.start_workflow(
                RUN_NOTIFIER_WORKFLOW_NAME,
                RunNotifierInput(tenant=run.tenant, run_id=run.run_id, agent=run.agent),
                id=run_notifier_id(run.run_id),
                # The run queue the write's queue serves (mirror writes have their own).
                task_queue=fairness.run_queue(activity.info().task_queue),
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # its notifier ran and ended: the run has been told
