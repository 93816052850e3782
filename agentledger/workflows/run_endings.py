"""How a run's ending shows in Temporal: as agentledger's status says (generation 5).

A completed run returns its `RunResult`. A failed one fails its workflow, once its receipt and
mirror are written, with an ApplicationError of type `RunFailed` whose details carry the
`RunResult`. A cancelled one ends Canceled: a person's cancel request ends it so already; a
run that ends cancelled without one (a person rejected it) has the worker send that request
(activity `run.cancel_own`), since a workflow cannot send one to itself.

Whoever waits for a run reads its result through `result_of_failure` (a client) or
`child_result` (a parent workflow), so a failed or cancelled run is a result, not an error.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from agentledger.core.constants import ACTIVITY_RUN_CANCEL_OWN
    from agentledger.core.results import RunResult
    from agentledger.core.states import RunStatus

RUN_FAILED = "RunFailed"


def failure(result: RunResult) -> ApplicationError:
    """What a failed run raises: Temporal shows it Failed, the details carry its result."""
    return ApplicationError(
        result.error or "the run failed",
        result.model_dump(mode="json"),
        type=RUN_FAILED,
        non_retryable=True,
    )


async def cancel_own(reason: str) -> None:
    """End the run as Canceled in Temporal: have the worker request its cancel, and end when
    the request arrives."""
    try:
        await workflow.execute_activity(
            ACTIVITY_RUN_CANCEL_OWN,
            reason,
            start_to_close_timeout=timedelta(seconds=30),
            cancellation_type=workflow.ActivityCancellationType.ABANDON,
        )
        await workflow.wait_condition(lambda: False)
    except ActivityError as err:
        if not is_cancelled_exception(err):
            raise
    raise asyncio.CancelledError(reason)


def result_of_failure(err: BaseException | None) -> RunResult | None:
    """The result a failed run carries in its failure (None: not a run's own failure)."""
    if isinstance(err, ApplicationError) and err.type == RUN_FAILED and err.details:
        return RunResult.model_validate(err.details[0])
    return None


def child_result(err: ChildWorkflowError, run_id: str) -> RunResult:
    """A child run that did not complete, as a result: the one a failed run carries, else
    cancelled (a cancel request) or failed (terminated, timed out) with the reason."""
    carried = result_of_failure(err.cause)
    if carried is not None:
        return carried
    cause = err.cause
    reason = cause.message if isinstance(cause, FailureError) and cause.message else str(err)
    return RunResult(
        run_id=run_id,
        status=RunStatus.CANCELLED if is_cancelled_exception(err) else RunStatus.FAILED,
        answer=None,
        error=reason,
    )
