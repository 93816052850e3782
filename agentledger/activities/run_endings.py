"""`run.cancel_own`: a run that ends cancelled without anyone's cancel request (a person
rejected it) asks Temporal to cancel it, so that Temporal shows it as Canceled as agentledger
does.

Temporal closes a workflow as Canceled only after a cancel request, and a workflow cannot
send one to itself (its external handle is refused), so the worker's client sends it.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client

from agentledger.core.constants import ACTIVITY_RUN_CANCEL_OWN


class RunEndingActivities:
    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=ACTIVITY_RUN_CANCEL_OWN)
    async def cancel_own(self, reason: str) -> None:
        info = activity.info()
        assert info.workflow_id is not None  # scheduled by the run workflow
        handle = self.client.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        await handle.cancel(reason=reason)
