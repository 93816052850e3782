"""What people do with runs: start, decide, pause, resume, cancel, inspect.

The CLI is a thin shell over these; tests call them directly with their own client.
Every failure becomes an `OperationError` whose message says what to do next.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError, is_cancelled_exception
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core import bounds, fairness, run_summaries, search_attributes
from agentledger.core import constants as names
from agentledger.core._wire import ApproveInput, ControlInput, RejectInput
from agentledger.core.admission_models import TenantLimits
from agentledger.core.approver_key import ApproverKey
from agentledger.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationError,
    OperationRefused,
    RunNotFound,
)
from agentledger.core.identity import Identity
from agentledger.core.keys import id_part
from agentledger.core.payload_limits import DEFAULT_LIMIT_BYTES
from agentledger.core.results import (
    ControlResult,
    DecisionResult,
    PendingApproval,
    RunResult,
    RunState,
)
from agentledger.core.run_reports import ActivityInFlight, RunReport, Started, WorkerSeen
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.states import RunStatus
from agentledger.ops import admission_ops, handles, projection, task_failures, waiting_runs
from agentledger.ops.in_flight import in_flight
from agentledger.store import mirror_views, tool_sets
from agentledger.store.artifacts import sandbox_executions
from agentledger.store.fork_store import ForkStore
from agentledger.store.mirror_store import MirrorStore
from agentledger.temporal.worker_presence import (
    DEFAULT_WAIT_SECONDS,
    Deadline,
    NoAnswer,
    no_worker,
    pollers_or_unknown,
    start_a_worker,
    within,
)
from agentledger.workflows import AgentRunWorkflow, run_endings
from agentledger.workflows.changes import for_new_run


def no_run(run_id: str) -> RunNotFound:
    """The one refusal for a run the caller may not see: a missing run and another tenant's
    read alike, word for word and exit code (3), so run ids cannot be probed."""
    return RunNotFound(f"no run {run_id!r}: `agentledger list` shows the runs")


def run_id_for(key: str | None) -> str:
    """The workflow id for an idempotency key: readable, and distinct for distinct keys."""
    if key is None:
        return names.RUN_ID_PREFIX + uuid.uuid4().hex[:12]
    return names.RUN_ID_PREFIX + id_part(key)


async def start_run(
    client: Client,
    spec: RunSpec,
    *,
    task_queue: str,
    indexed: bool = True,
    limits: TenantLimits | None = None,
    mirror: AsyncConnectionPool | None = None,
    run_id: str | None = None,
    wait: float | None = None,
) -> Started:
    """The engine's start, under the policy given: only `agentledger.ops.door.start` calls it
    (tests/test_door.py), with the policy it read; tests call it to set up runs. The same
    idempotency key always names the same run (`run_id`, else `run_id_for` the key).

    `indexed` sets the search attributes (agent, tenant, status, priority) the Web UI filters
    on. The run's priority and its tenant (the fairness key, weighted by `limits.weight`)
    reach every step it schedules. A tenant with a cap starts through its admission queue.
    With the `mirror`, a run Temporal has forgotten (its retention passed) is still the same
    run: its id is not started again over the old run's conversation, journal and ledger,
    and the caller is told it exists (its receipt is in the mirror). With `wait` (a
    command's), a capped tenant's start gives up after that long (admission_ops.enqueue_run).
    """
    bounds.check(spec, "run spec")
    run = for_new_run(spec)
    limits = limits or TenantLimits(tenant=run.tenant)
    run_id = run_id or run_id_for(run.idempotency_key)
    if mirror is not None and await _mirrored(mirror, run_id):
        return Started(run_id, existing=True)
    if limits.capped:
        queued = await admission_ops.enqueue_run(
            client,
            run_id,
            run,
            task_queue=task_queue,
            indexed=indexed,
            limits=limits,
            seconds=wait,
        )
        return Started(run_id, existing=queued.existing, queue_position=queued.position)
    try:
        await client.start_workflow(
            AgentRunWorkflow.run,
            run,
            id=run_id,
            task_queue=task_queue,
            search_attributes=(
                search_attributes.for_run(
                    # It starts at once (no admission queue): a running run, which its
                    # first step does not need to upsert.
                    run.agent,
                    run.tenant,
                    search_attributes.shown_status(RunStatus.PLANNING),
                    run.priority,
                )
                if indexed
                else None
            ),
            priority=fairness.run_priority(run.priority, run.tenant, limits.weight),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            # What the Web UI shows above the timeline: who, for whom, what.
            static_summary=run_summaries.static_summary(run),
            static_details=run_summaries.static_details(run, run_id),
        )
    except WorkflowAlreadyStartedError:
        return Started(run_id, existing=True)
    except RPCError as err:
        if (
            indexed
            and err.status == RPCStatusCode.INVALID_ARGUMENT
            and "search attribute" in (err.message.lower())
        ):
            raise OperationError(
                f"the cluster lacks agentledger's search attributes ({err.message}): start a "
                "worker once (it registers them) or set AGENTLEDGER_SEARCH_ATTRIBUTES=0"
            ) from err
        raise
    return Started(run_id, existing=False)


async def require_tools(pool: AsyncConnectionPool, task_queue: str, tools: list[str]) -> None:
    """Refuse a run naming a tool the queue's workers lack, before it starts."""
    served = await tool_sets.served_tools(pool, task_queue)
    if served is None:
        raise OperationRefused(
            f"no worker has served task queue {task_queue!r} yet, so its tools are unknown: "
            "start one (`agentledger-worker --tools ...`), then start the run"
        )
    missing = sorted(set(tools) - set(served))
    if missing:
        raise OperationRefused(
            f"the workers on task queue {task_queue!r} have no tool {', '.join(missing)} "
            f"(they have: {', '.join(served) or 'none'}); start them with the tools the "
            "agent names, or fix its profile"
        )


async def _mirrored(pool: AsyncConnectionPool, run_id: str) -> bool:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,))
        return await cur.fetchone() is not None


@dataclass
class RunRef:
    """A run the server knows, with what it says of it without asking a worker."""

    handle: WorkflowHandle[Any, Any]
    running: bool
    task_queue: str
    indexed_status: str | None
    in_flight: list[ActivityInFlight] = field(default_factory=list)


async def find_run(
    client: Client,
    run_id: str,
    deadline: Deadline,
    *,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunRef:
    """The one accessor every command that reads or writes a run goes through: the run, if
    it exists and (with `tenant`, the caller's) belongs to that tenant; no worker needed.

    Another tenant's run is refused exactly as a missing one (`no_run`), so ids cannot be
    probed.
    """
    handle = client.get_workflow_handle(run_id)
    try:
        description = await handles.describe_within(handle, deadline)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(run_id) from err
        raise
    indexed = description.typed_search_attributes
    if tenant is not None:
        owner = indexed.get(search_attributes.TENANT)
        if owner is None and mirror is not None:
            owner = await mirror_views.run_tenant(mirror, run_id)
        if owner is None:
            try:
                state: RunState = await within(
                    deadline.share(0.5), handle.query(AgentRunWorkflow.state)
                )
                owner = state.tenant
            except (NoAnswer, RPCError) as err:
                raise NotAnswered(
                    f"cannot tell which tenant run {run_id} belongs to while no worker "
                    "answers and the mirror has not seen it; try again when a worker runs"
                ) from err
        if owner != tenant:
            raise no_run(run_id)
    return RunRef(
        handle=handle,
        running=description.status == WorkflowExecutionStatus.RUNNING,
        task_queue=description.task_queue,
        indexed_status=indexed.get(search_attributes.STATUS),
        in_flight=[in_flight(a) for a in description.raw_description.pending_activities],
    )


async def _running(
    client: Client,
    run_id: str,
    deadline: Deadline,
    *,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunRef:
    bounds.check_text("run_id", run_id)
    bounds.check_text("tenant", tenant)
    run = await find_run(client, run_id, deadline, tenant=tenant, mirror=mirror)
    if not run.running:
        raise OperationRefused(
            f"run {run_id} has already ended; `agentledger receipt {run_id}` shows how"
        )
    return run


async def _no_worker(client: Client, run: RunRef, deadline: Deadline) -> str:
    found = await pollers_or_unknown(client, run.task_queue, seconds=deadline.share(0.2))
    return no_worker(run.task_queue, found, deadline.seconds)


def _recorded(what: str, run: RunRef) -> str:
    return (
        f"recorded: no worker answered, so the run holds the {what} in its history and applies "
        f"it, with the same checks, when a worker takes it ({start_a_worker(run.task_queue)}); "
        f"`agentledger status {run.handle.id}` shows the outcome"
    )


async def pending_approval(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> PendingApproval:
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    try:
        pending: PendingApproval | None = await handles.ask_within(
            client, run.handle, AgentRunWorkflow.get_pending_approval, deadline
        )
    except NoAnswer as err:
        raise NotAnswered(await _no_worker(client, run, deadline)) from err
    if pending is None:
        raise OperationRefused(
            f"run {run_id} is not waiting for an approval (status {run.indexed_status})"
        )
    return pending


# A decider's check of the approval it is about to decide (the role it asks for): raises
# to refuse before anything is sent.
Judge = Callable[[PendingApproval], None]


async def approve(
    client: Client,
    run_id: str,
    *,
    by: str,
    role: str | None = None,
    edit: JsonDict | None = None,
    replace: JsonDict | None = None,
    tenant: str | None = None,
    action_hash: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    mirror: AsyncConnectionPool | None = None,
    signer: ApproverKey | None = None,
    decider: Identity | None = None,
    judge: Judge | None = None,
) -> DecisionResult:
    """Approve the pending action (or, with `action_hash`, only that exact action the
    approver saw), as `decider` in `role` (None: the role the approval asks for), with an
    `edit` (a JSON Merge Patch of its arguments) or a `replace`ment; with `signer`, signed
    by that approver's key; `judge` refuses first what the decider may not decide."""
    return await _decide(
        client,
        run_id,
        (names.UPDATE_APPROVE, AgentRunWorkflow.approve_signal),
        lambda pending, required: ApproveInput(
            action_hash=action_hash or pending,
            by=by,
            role=role or required,
            edit=edit,
            replace=replace,
            tenant=tenant,
            decider=decider,
        ),
        wait=wait,
        mirror=mirror,
        tenant=tenant,
        signer=signer,
        judge=judge,
    )


async def reject(
    client: Client,
    run_id: str,
    *,
    by: str,
    reason: str,
    role: str | None = None,
    tenant: str | None = None,
    action_hash: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    mirror: AsyncConnectionPool | None = None,
    signer: ApproverKey | None = None,
    decider: Identity | None = None,
    judge: Judge | None = None,
) -> DecisionResult:
    """Reject the pending action, saying why: the run, its model and its receipt hear it."""
    if not reason.strip():
        raise InvalidRequest(
            "a rejection needs a reason (--reason TEXT): the run and its receipt record it"
        )
    return await _decide(
        client,
        run_id,
        (names.UPDATE_REJECT, AgentRunWorkflow.reject_signal),
        lambda pending, required: RejectInput(
            action_hash=action_hash or pending,
            by=by,
            role=role or required,
            reason=reason,
            tenant=tenant,
            decider=decider,
        ),
        wait=wait,
        mirror=mirror,
        tenant=tenant,
        signer=signer,
        judge=judge,
    )


async def _decide(
    client: Client,
    run_id: str,
    messages: tuple[str, Any],
    decision: Callable[[str, str], ApproveInput | RejectInput],
    *,
    wait: float,
    mirror: AsyncConnectionPool | None,
    tenant: str | None,
    signer: ApproverKey | None,
    judge: Judge | None,
) -> DecisionResult:
    """Send a decision bound to the action pending now, in the role it asks for unless the
    decision names one; the workflow judges it.

    With a worker: an update, so a refusal comes back at once. When the run takes no more
    updates (its slots held by other clients, or its total spent) or no worker accepts it:
    a signal, which the server keeps in the run's history until a worker applies it with
    the same checks (a refusal is then recorded on the run). Without a worker the approval
    it answers comes from the mirror. The answer says which happened, and claims the run
    holds the decision only once the server confirmed it.
    """
    update, signal = messages
    bounds.check(decision("0" * 16, "approver"), "decision")  # before anything is asked or sent
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    try:
        state: RunState = await handles.ask_within(
            client, run.handle, AgentRunWorkflow.state, deadline
        )
    except NoAnswer:
        if mirror is None:
            raise NotAnswered(
                await _no_worker(client, run, deadline)
                + "; or set DATABASE_URL, so decisions can be recorded while none runs"
            ) from None
        mirrored = await mirror_views.run_state(mirror, run_id)
        pending = mirrored[0].pending_approval if mirrored else None
        if pending is None:
            raise OperationRefused(
                f"run {run_id} is not waiting for an approval as far as the mirror knows "
                f"(status {run.indexed_status}), and {await _no_worker(client, run, deadline)}"
            ) from None
        if judge is not None:
            judge(pending)
        message = _signed(
            decision(pending.action_hash, pending.required_role), run_id, pending, signer
        )
        await handles.signal_within(run.handle, signal, message, deadline)
        return DecisionResult(
            approval_id=pending.approval_id,
            decision="recorded",
            status=RunStatus.WAITING_FOR_APPROVAL,
            note=_recorded("decision", run),
        )
    pending = state.pending_approval
    if pending is None:
        raise OperationRefused(
            f"run {run_id} is not waiting for an approval (status {state.status.value})"
        )
    if judge is not None:
        judge(pending)
    message = _signed(decision(pending.action_hash, pending.required_role), run_id, pending, signer)
    try:
        accepted = await handles.admit_update(
            client, run.handle, update, message, deadline.share(0.5), DecisionResult
        )
    except handles.NotAdmitted as err:
        await handles.signal_within(run.handle, signal, message, deadline)
        return await _signalled_decision(client, run, state, message, err.reason, deadline)
    try:
        return await within(  # type: ignore[no-any-return]
            deadline.left(), accepted.result(rpc_timeout=timedelta(seconds=deadline.left()))
        )
    except WorkflowUpdateFailedError as err:
        raise OperationRefused(f"refused: {handles.refusal(err)}") from err
    except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
        return DecisionResult(
            approval_id=pending.approval_id,
            decision="recorded",
            status=RunStatus.WAITING_FOR_APPROVAL,
            note=(
                "recorded: the run accepted the decision (its history holds it) and applies "
                f"it at its next step; `agentledger status {run_id}` shows the outcome"
            ),
        )


# How long a decision sent as a signal waits to see the run apply it, within `--wait`.
SIGNAL_OUTCOME_SECONDS = 3.0


async def _signalled_decision(
    client: Client,
    run: RunRef,
    before: RunState,
    message: ApproveInput | RejectInput,
    why: str,
    deadline: Deadline,
) -> DecisionResult:
    """A decision the server confirmed as a signal: what the run made of it, if it says so
    within a few seconds, else that the run holds it."""
    pending = before.pending_approval
    assert pending is not None
    seen = {r.model_dump_json() for r in before.refusals}
    waited = Deadline(min(SIGNAL_OUTCOME_SECONDS, deadline.left()))
    while waited.left() > 0.15:
        try:
            state: RunState = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.state, waited
            )
        except (NoAnswer, OperationError):
            break
        refused = [
            r
            for r in state.refusals
            if r.model_dump_json() not in seen
            and r.by == message.by
            and r.approval_id in (None, pending.approval_id)
        ]
        if refused:
            raise OperationRefused(f"refused and recorded: {refused[-1].reason}")
        decided = next((d for d in state.decided if d.approval_id == pending.approval_id), None)
        if decided is not None and decided.by != message.by:
            raise OperationRefused(
                f"not applied: {decided.by or 'nobody'} decided this approval first "
                f"({decided.decision}); the run ignores the later decision, recording it"
            )
        if decided is not None:
            return DecisionResult(
                approval_id=pending.approval_id,
                decision=decided.decision,
                status=state.status,
                note=f"sent as a signal: {why}",
            )
        await asyncio.sleep(0.1)
    return DecisionResult(
        approval_id=pending.approval_id,
        decision="recorded",
        status=RunStatus.WAITING_FOR_APPROVAL,
        note=(
            f"recorded: {why}, so the decision went as a signal; the run holds it in its "
            "history and applies it, with the same checks, at its next step; "
            f"`agentledger status {run.handle.id}` shows the outcome"
        ),
    )


def _signed(
    decision: ApproveInput | RejectInput,
    run_id: str,
    pending: PendingApproval,
    signer: ApproverKey | None,
) -> ApproveInput | RejectInput:
    if signer is None:
        return decision
    return decision.model_copy(
        update={"signature": signer.sign(run_id, pending.approval_id, decision)}
    )


# What a pause or a resume sends a run: the update a worker answers, and the signal the run
# keeps while none does.
CONTROLS: dict[str, tuple[str, Any]] = {
    "pause": (names.UPDATE_PAUSE, AgentRunWorkflow.pause_signal),
    "resume": (names.UPDATE_RESUME, AgentRunWorkflow.resume_signal),
}


async def control(
    client: Client,
    run_id: str,
    act: Literal["pause", "resume"],
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> ControlResult:
    """Pause (at the next step boundary) or resume the run: an update when a worker answers
    and the run takes it, else a signal the run keeps (the server confirmed it before the
    answer says so)."""
    input = ControlInput(by=by)
    bounds.check(input, "control")
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    return await control_run(
        client, run, CONTROLS[act], input, deadline, act == "pause", act, mirror
    )


async def control_run(
    client: Client,
    run: RunRef,
    messages: tuple[str, Any],
    input: ControlInput,
    deadline: Deadline,
    paused: bool,
    what: str,
    mirror: AsyncConnectionPool | None,
    when: str = "at its next step boundary",
) -> ControlResult:
    """`_control` for a run found already: pause, resume, or a session's end."""
    update, signal = messages
    try:
        await handles.ask_within(client, run.handle, AgentRunWorkflow.state, deadline)
    except NoAnswer:
        await handles.signal_within(run.handle, signal, input, deadline)
        return ControlResult(
            status=await _last_status(run, mirror),
            paused=paused,
            message=_recorded(what, run),
        )
    try:
        accepted = await handles.admit_update(
            client, run.handle, update, input, deadline.share(0.5), ControlResult
        )
    except handles.NotAdmitted as err:
        await handles.signal_within(run.handle, signal, input, deadline)
        return ControlResult(
            status=await _last_status(run, mirror),
            paused=paused,
            message=(
                f"recorded: {err.reason}, so the {what} went as a signal; the run holds it "
                f"in its history and applies it {when}"
            ),
        )
    try:
        return await within(  # type: ignore[no-any-return]
            deadline.left(), accepted.result(rpc_timeout=timedelta(seconds=deadline.left()))
        )
    except WorkflowUpdateFailedError as err:
        raise OperationRefused(f"refused: {handles.refusal(err)}") from err
    except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
        return ControlResult(
            status=await _last_status(run, mirror),
            paused=paused,
            message=f"recorded: the run accepted the {what} (its history holds it)",
        )


async def _last_status(run: RunRef, mirror: AsyncConnectionPool | None) -> RunStatus:
    """What the run was last seen doing, without asking a worker: its search attribute, or,
    where that shows only "running" (agentledger.core.search_attributes), the mirror's row;
    with neither, queued."""
    shown = run.indexed_status
    if shown is not None and shown != search_attributes.RUNNING:
        return RunStatus(shown)
    found = await mirror_views.run_state(mirror, run.handle.id) if mirror is not None else None
    if found is not None:
        return found[0].status
    return RunStatus.QUEUED  # no worker has written its row: it has not started yet


async def cancel(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> str:
    """Ask the run to end as cancelled: the server records the request, a worker acts on it."""
    deadline = Deadline(wait)
    run = await _running(client, run_id, deadline, tenant=tenant, mirror=mirror)
    try:
        await within(
            deadline.left(), run.handle.cancel(rpc_timeout=timedelta(seconds=deadline.left()))
        )
    except NoAnswer as err:
        raise NotAnswered(
            f"not confirmed: the server did not confirm the cancel of {run_id} within "
            f"{deadline.seconds:g}s; `agentledger status {run_id}` shows whether it arrived"
        ) from err
    except RPCError as err:
        raise OperationRefused(f"not sent: the server refused the cancel ({err.message})") from err
    try:
        await handles.ask_within(client, run.handle, AgentRunWorkflow.state, deadline)
    except NoAnswer:
        return (
            f"cancel recorded: {run_id} ends as cancelled and writes its receipt when a "
            f"worker takes it ({await _no_worker(client, run, deadline)})"
        )
    return f"cancel requested: {run_id} ends as cancelled and writes its receipt"


async def result(
    client: Client,
    run_id: str,
    *,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunResult:
    """Wait for the run to end: its result, as its workflow returned it, or as a failed run
    carries it in its failure (agentledger/workflows/run_endings.py); a run Temporal cancelled
    returns none, so its result is read from its final state."""
    if tenant is not None:
        await find_run(client, run_id, Deadline(DEFAULT_WAIT_SECONDS), tenant=tenant, mirror=mirror)
    handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        carried = run_endings.result_of_failure(err.cause)
        if carried is not None:
            return carried
        if not is_cancelled_exception(err.cause):
            raise
    return await _ended_as(client, handle, mirror)


async def _ended_as(
    client: Client, handle: WorkflowHandle[Any, Any], mirror: AsyncConnectionPool | None
) -> RunResult:
    """A closed run's result from its state: the workflow's own (a worker replays it), else
    the mirror's (its receipt was written before the workflow ended)."""
    deadline = Deadline(DEFAULT_WAIT_SECONDS)
    state: RunState | None = None
    try:
        state = await handles.ask_within(client, handle, AgentRunWorkflow.state, deadline, 0.8)
    except NoAnswer:
        mirrored = await mirror_views.run_state(mirror, handle.id) if mirror else None
        state = mirrored[0] if mirrored else None
    if state is None:
        raise NotAnswered(
            f"run {handle.id} was cancelled; no worker answered with its final state and no "
            "mirror is configured: `agentledger receipt` shows it once DATABASE_URL is set"
        )
    return RunResult(
        run_id=handle.id,
        status=state.status,
        answer=state.result,
        error=state.error,
        tokens_in=state.tokens_in,
        tokens_out=state.tokens_out,
        cost_usd=state.cost_usd,
    )


async def status(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunState:
    """The live state, from the workflow itself (a worker answers the query)."""
    deadline = Deadline(wait)
    run = await find_run(client, run_id, deadline, tenant=tenant, mirror=mirror)
    try:
        state: RunState = await handles.ask_within(
            client, run.handle, AgentRunWorkflow.state, deadline, 0.8
        )
    except NoAnswer as err:
        latest = await _latest_events(client, run_id, deadline)
        failing = await task_failures.failing_workflow_task(client, latest)
        raise NotAnswered(failing or await _no_worker(client, run, deadline)) from err
    return await _with_queue_position(client, run_id, state)


async def _with_queue_position(client: Client, run_id: str, state: RunState) -> RunState:
    """A run waiting for its tenant's slot says where it stands in the queue."""
    if state.status == RunStatus.QUEUED and state.admission is not None:
        place = await admission_ops.position(client, state.admission, run_id)
        state = state.model_copy(update={"queue_position": place.position if place else None})
    return state


async def inspect(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunReport:
    """The run's state from its workflow, or from the mirror when no worker answers (nor
    can: a worker that fails its workflow task answers no query either)."""
    deadline = Deadline(wait)
    run = await find_run(client, run_id, deadline, tenant=tenant, mirror=mirror)
    now = datetime.now(UTC)
    found = await pollers_or_unknown(client, run.task_queue, seconds=deadline.share(0.2))
    latest = await _latest_events(client, run_id, deadline)
    progress = _last_progress(latest)
    failing = await task_failures.failing_workflow_task(client, latest) if run.running else None
    state: RunState | None = None
    if not failing and (not run.running or any(p.fresh(now) for p in found)):
        try:
            state = await handles.ask_within(client, run.handle, AgentRunWorkflow.state, deadline)
            state = await _with_queue_position(client, run_id, state)
        except NoAnswer:
            state = None
    source: Literal["workflow", "mirror", "temporal"] = "workflow"
    waiting = None
    if state is None and run.running and progress is None and not failing:
        waiting = await waiting_runs.untaken(client, run.handle, deadline.share(0.3))
    if waiting is not None:
        state, source = waiting[0], "temporal"
    elif state is None:
        mirrored = await mirror_views.run_state(mirror, run_id) if mirror else None
        if mirrored is None:
            raise NotAnswered(
                (failing or await _no_worker(client, run, deadline))
                + ("" if mirror else "; set DATABASE_URL to read the mirror meanwhile")
            )
        state, source = mirrored[0], "mirror"
    return RunReport(
        source=source,
        state=state,
        task_queue=run.task_queue,
        waiting_since=waiting[1] if waiting else None,
        workers=[
            WorkerSeen(identity=p.identity, last_poll=p.last_poll, seconds_ago=p.age_seconds(now))
            for p in found
        ],
        last_progress_at=progress,
        no_progress_seconds=(now - progress).total_seconds() if progress else None,
        in_flight=run.in_flight,
        workflow_task_failure=failing,
    )


async def _latest_events(client: Client, run_id: str, deadline: Deadline) -> list[HistoryEvent]:
    """The run's latest history events, newest first (none when the server does not say)."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=run_id),
        maximum_page_size=100,
    )
    seconds = deadline.share(0.2)
    try:
        response = await within(
            seconds,
            client.workflow_service.get_workflow_execution_history_reverse(
                request, timeout=timedelta(seconds=seconds)
            ),
        )
    except (NoAnswer, RPCError):
        return []
    return list(response.history.events)


def _last_progress(newest_first: list[HistoryEvent]) -> datetime | None:
    """When a worker last completed a workflow task of the run."""
    for event in newest_first:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return event.event_time.ToDatetime(tzinfo=UTC)
    return None


async def list_runs(
    pool: AsyncConnectionPool,
    *,
    status: str | None = None,
    limit: int = 50,
    tenant: str | None = None,
) -> list[JsonDict]:
    """Recent runs from the mirror; with `tenant`, that tenant's only."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT run_id, status, tenant, priority, user_id, task, current_step_id, tokens_in,
                      tokens_out, cost_usd::float, duplicates_prevented, created_at, finished_at
               FROM runs WHERE (%(status)s::text IS NULL OR status = %(status)s)
                 AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
               ORDER BY created_at DESC LIMIT %(limit)s""",
            {"status": status, "limit": limit, "tenant": tenant},
        )
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]


async def receipt(pool: AsyncConnectionPool, run_id: str, *, tenant: str | None = None) -> JsonDict:
    """The run's receipt; with `tenant`, only if the run is that tenant's."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT r.receipt FROM receipts r LEFT JOIN runs USING (run_id)
               WHERE run_id = %(run)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)""",
            {"run": run_id, "tenant": tenant},
        )
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute(
                """SELECT status FROM runs
                   WHERE run_id = %(run)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)""",
                {"run": run_id, "tenant": tenant},
            )
            run = await cur.fetchone()
            if run is None:
                raise no_run(run_id)
            raise OperationRefused(
                f"run {run_id} has no receipt yet (status {run[0]}); receipts are written "
                "when a run ends"
            )
        # Each run_code execution and the image digest it ran on, from its step's output.
        sandbox = await sandbox_executions(conn, run_id)
    # Forks made after the receipt was written: the link lives in `run_forks`.
    return {
        **dict(row[0]),
        "forks": await ForkStore(pool).forks_of(run_id),
        **({"sandbox_executions": sandbox} if sandbox else {}),
    }


async def check_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
    tenant: str | None = None,
) -> JsonDict:
    """Compare the run's mirror rows with those its Temporal history derives."""
    running = (
        await find_run(client, run_id, Deadline(DEFAULT_WAIT_SECONDS), tenant=tenant, mirror=pool)
    ).running
    found = await projection.check(client, pool, run_id, payload_limit=payload_limit)
    counts = {kind: sum(d.kind == kind for d in found) for kind in projection.KINDS}
    return {
        "run_id": run_id,
        "open": running,
        "agrees": not found,
        "counts": counts,
        "differences": [str(d) for d in found],
    }


async def rebuild_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
    tenant: str | None = None,
) -> JsonDict:
    """Rewrite an ended run's mirror rows from its Temporal history, then check them."""
    found = await find_run(
        client, run_id, Deadline(DEFAULT_WAIT_SECONDS), tenant=tenant, mirror=pool
    )
    if found.running:
        raise OperationRefused(
            f"run {run_id} is still running and keeps writing its mirror; rebuild it once "
            f"it ends (`agentledger mirror check {run_id}` compares it now)"
        )
    derived = await projection.project(client, run_id, payload_limit=payload_limit)
    if derived.run is None:
        raise OperationError(f"run {run_id}'s history holds no mirror write to rebuild from")
    await MirrorStore(pool).rebuild(derived.batch(), derived.receipt)
    return await check_mirror(client, pool, run_id, payload_limit=payload_limit, tenant=tenant)
