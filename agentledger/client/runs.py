"""`client.runs`: start a run, act on it (decide, pause, say, cancel) and read it (state,
receipt, its story as it happens). Another tenant's run reads as a missing one
(agentledger.client.scope)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import is_cancelled_exception
from temporalio.service import RPCError

from agentledger.client import admission, forks, handles, starts, task_failures, waiting_runs
from agentledger.client import watch as watching
from agentledger.client.approvals import Approvals
from agentledger.client.receipts import receipt_of
from agentledger.client.scope import Scope
from agentledger.client.steering import Steering
from agentledger.core.approver_key import ApproverKey
from agentledger.core.constants import DEFAULT_WAIT_SECONDS, DoubleTexting
from agentledger.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationRefused,
    ServiceUnreachable,
)
from agentledger.core.identity import Identity
from agentledger.core.listings import InboxItem, MirroredStep, RunRow, TimelineStep
from agentledger.core.results import (
    ControlResult,
    DecisionResult,
    Receipt,
    RunResult,
    RunState,
    RunVersion,
    SayResult,
    WatchItem,
)
from agentledger.core.run_reports import RunReport, Started, WorkerSeen
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.states import RunStatus, is_terminal
from agentledger.profiles import Agent
from agentledger.store import mirror_views
from agentledger.temporal import deployments
from agentledger.temporal.worker_presence import Deadline, NoAnswer, pollers_or_unknown, within
from agentledger.workflows import AgentRunWorkflow, run_endings

logger = logging.getLogger(__name__)


class Runs:
    """The caller's runs: another tenant's reads as a missing one."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    # ------------------------------------------------------------ starting runs

    async def start(
        self,
        task: str | None = None,
        *,
        agent: Agent | None = None,
        spec: RunSpec | None = None,
        require_tools: bool | None = None,
        double_texting: DoubleTexting | None = None,
        wait: float | None = None,
        **fields: Any,
    ) -> Started:
        """Start a run: `spec`, or one made of `agent`'s profile with `task` and `fields`
        (any run-spec field, e.g. `idempotency_key`) over it, or of those alone. Returns its
        id, whether it existed already (the same idempotency key: then it is the same run)
        and its place in its tenant's queue. The run takes its tenant (the caller's, unless
        the spec names one), approvers, cap and weight from the database
        (agentledger.client.starts); without one, the start is refused. With
        `require_tools` (by default, for an agent's run), a run naming a tool its task
        queue's workers lack is refused before it starts; with `wait`, a start no worker
        could take within it (a capped tenant's) is not sent at all. A keyed start whose key
        names a session already under way, with another task, says that task to it as a
        message (`said`), as `double_texting` asks (else the session's own policy): under
        `reject`, while a turn is in flight, it is refused (OperationRefused)."""
        if spec is None:
            if task is not None:
                fields["task"] = task
            spec = agent.spec(**fields) if agent is not None else RunSpec.model_validate(fields)
        elif task is not None or agent is not None or fields:
            raise InvalidRequest("pass spec=, or a task, agent and run-spec fields, not both")
        scope = self.scope
        if (agent is not None if require_tools is None else require_tools) and spec.allowed_tools:
            pool = await scope.mirror() or await scope.database()
            await starts.require_tools(pool, scope.config.task_queue, spec.allowed_tools)
        started = await starts.start(scope, spec, wait=wait)
        if started.existing and spec.session is not None and spec.idempotency_key is not None:
            return await self._double_text(started, spec, double_texting, wait)
        return started

    async def _double_text(
        self, started: Started, spec: RunSpec, asked: DoubleTexting | None, wait: float | None
    ) -> Started:
        """A keyed start of a session under way: the same start again is that session; one
        with another task says the task to it (the same start sent twice says it once)."""
        try:
            state = await self.status(started.run_id, wait=wait)
        except NotAnswered:
            return started  # no worker to tell whether it is another task: the session stands
        if is_terminal(state.status) or state.task == spec.task:
            return started
        same = hashlib.sha256(f"{spec.idempotency_key}\n{spec.task}".encode()).hexdigest()[:32]
        said = await Steering(self.scope).say(
            started.run_id,
            spec.task,
            by=spec.user,
            message_id=f"start-{same}",
            double_texting=asked,
            wait=wait,
        )
        return dataclasses.replace(started, said=said)

    async def fork(
        self,
        run_id: str,
        *,
        from_step: int,
        edit_output: Any = None,
        key: str | None = None,
    ) -> Started:
        """A new run from `run_id`'s step `from_step` (steps before it as recorded; an edited
        output for a tool step): its id, and whether it existed already (the same key)."""
        return await forks.fork_run(
            self.scope, run_id, from_step=from_step, edit_output=edit_output, key=key
        )

    def id_of(self, key: str) -> str:
        """The id of the run the caller's tenant starts with idempotency key `key` (it may
        not exist): how a caller finds again a run it named."""
        return self.scope.run_id(key)

    # ------------------------------------------------------------ acting on a run

    async def approve(
        self,
        run_id: str,
        *,
        by: str,
        role: str | None = None,
        edit: JsonDict | None = None,
        replace: JsonDict | None = None,
        signer: ApproverKey | None = None,
        action_hash: str | None = None,
        wait: float | None = None,
    ) -> DecisionResult:
        """Approve the pending action in the role it asks for (`role`, if given, must be
        that one). An authenticated caller (the HTTP door's) decides as its credential
        proves, only an approval whose role it holds; with `signer`
        (`client.approvers.key(name)`) the decision is signed with that key and made in its
        role, as runs with keyed approvers require; else as the operator, for `by`. `edit`
        is a JSON Merge Patch of the arguments (RFC 7396: null removes a field), `replace`
        the whole arguments instead; with `action_hash`, the decision holds only if the
        pending action is still that one."""
        return await Approvals(self.scope).approve(
            run_id,
            edit=edit,
            replace=replace,
            action_hash=action_hash,
            signer=signer,
            wait=wait,
            **self._decider(by, role, signer),
        )

    async def reject(
        self,
        run_id: str,
        *,
        by: str,
        reason: str,
        role: str | None = None,
        signer: ApproverKey | None = None,
        action_hash: str | None = None,
        wait: float | None = None,
    ) -> DecisionResult:
        return await Approvals(self.scope).reject(
            run_id,
            reason=reason,
            action_hash=action_hash,
            signer=signer,
            wait=wait,
            **self._decider(by, role, signer),
        )

    def _decider(self, by: str, role: str | None, signer: ApproverKey | None) -> dict[str, Any]:
        """Who decides, and in which role: the authenticated caller's credential (the role
        the approval asks for), an approver's key (its role), or the operator (a role it
        names: no default is a free pass), `by` saying for whom."""
        if self.scope.caller.identity.kind != "operator":
            return {"by": by, "role": role, "decider": None}
        if signer is not None:
            if role is not None and role != signer.signer.role:
                raise InvalidRequest(
                    f"{signer.signer.name}'s key is registered for role "
                    f"{signer.signer.role!r}, not {role!r}"
                )
            key = signer.signer
            return {
                "by": key.name,
                "role": key.role,
                "decider": Identity.of_approver(key.key_id, key.name),
            }
        if not role:
            raise InvalidRequest(
                "name the role this decision is made in: role='approver' (the role the "
                "approval asks for, shown by status), or pass signer= (its key carries the role)"
            )
        return {"by": by, "role": role, "decider": self.scope.caller.identity}

    async def pause(self, run_id: str, *, wait: float | None = None) -> ControlResult:
        """Pause at the next step boundary (recorded for later while no worker runs)."""
        return await Steering(self.scope).pause(run_id, wait=wait)

    async def resume(self, run_id: str, *, wait: float | None = None) -> ControlResult:
        return await Steering(self.scope).resume(run_id, wait=wait)

    async def say(
        self,
        run_id: str,
        text: str,
        *,
        by: str = "cli",
        message_id: str | None = None,
        double_texting: DoubleTexting | None = None,
        wait: float | None = None,
    ) -> SayResult:
        """Tell a run in flight something: it reads the message at its next model call, or,
        with `on_message: interrupt`, replans with it at once (kept while no worker runs). To
        a session whose turn is in flight, it does what `double_texting` asks (within its
        tenant's policy), else what the session's policy says."""
        return await Steering(self.scope).say(
            run_id, text, by=by, message_id=message_id, double_texting=double_texting, wait=wait
        )

    async def cancel(self, run_id: str, *, wait: float | None = None) -> str:
        """End the run as cancelled (it writes its receipt); returns what happened: the
        server records the request, a worker acts on it."""
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        run = await self.scope.running(run_id, deadline)
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
            raise OperationRefused(
                f"not sent: the server refused the cancel ({err.message})"
            ) from err
        try:
            await handles.ask_within(client, run.handle, AgentRunWorkflow.state, deadline)
        except NoAnswer:
            return (
                f"cancel recorded: {run_id} ends as cancelled and writes its receipt when a "
                f"worker takes it ({await handles.no_worker_note(client, run, deadline)})"
            )
        return f"cancel requested: {run_id} ends as cancelled and writes its receipt"

    # ------------------------------------------------------------ reading a run

    async def status(self, run_id: str, *, wait: float | None = None) -> RunState:
        """The live state, from the run itself (a worker answers the query)."""
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        run = await self.scope.find_run(run_id, deadline)
        try:
            state: RunState = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.state, deadline, 0.8
            )
        except NoAnswer as err:
            latest = await _latest_events(client, run_id, deadline)
            failing = await task_failures.failing_workflow_task(client, latest)
            raise NotAnswered(
                failing or await handles.no_worker_note(client, run, deadline)
            ) from err
        return await _with_queue_position(client, run_id, state)

    async def inspect(self, run_id: str, *, wait: float | None = None) -> RunReport:
        """The state with where it came from: the run itself, or the mirror while no worker
        answers (nor can: a worker that fails its workflow task answers no query either);
        who serves the run and when it last moved."""
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        mirror = await self.scope.mirror()
        run = await self.scope.find_run(run_id, deadline)
        now = datetime.now(UTC)
        found = await pollers_or_unknown(client, run.task_queue, seconds=deadline.share(0.2))
        latest = await _latest_events(client, run_id, deadline)
        progress = _last_progress(latest)
        failing = await task_failures.failing_workflow_task(client, latest) if run.running else None
        state: RunState | None = None
        if not failing and (not run.running or any(p.fresh(now) for p in found)):
            try:
                state = await handles.ask_within(
                    client, run.handle, AgentRunWorkflow.state, deadline
                )
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
                    (failing or await handles.no_worker_note(client, run, deadline))
                    + ("" if mirror else "; set DATABASE_URL to read the mirror meanwhile")
                )
            state, source = mirrored[0], "mirror"
        return RunReport(
            source=source,
            state=state,
            task_queue=run.task_queue,
            waiting_since=waiting[1] if waiting else None,
            workers=[
                WorkerSeen(
                    identity=p.identity, last_poll=p.last_poll, seconds_ago=p.age_seconds(now)
                )
                for p in found
            ],
            last_progress_at=progress,
            no_progress_seconds=(now - progress).total_seconds() if progress else None,
            in_flight=run.in_flight,
            workflow_task_failure=failing,
        )

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run to end: its result, as its workflow returned it, or as a failed
        run carries it in its failure (agentledger.workflows.run_endings); a run Temporal
        cancelled returns none, so its result is read from its final state."""
        await self.scope.check_visible(run_id)
        client = await self.scope.temporal()
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        try:
            return await handle.result()
        except WorkflowFailureError as err:
            carried = run_endings.result_of_failure(err.cause)
            if carried is not None:
                return carried
            if not is_cancelled_exception(err.cause):
                raise
        return await _ended_as(client, handle, await self.scope.mirror())

    async def receipt(self, run_id: str) -> Receipt:
        """What the run did, cost and changed: written when it ended, with the forks made of
        it since and its sandbox executions."""
        return Receipt.model_validate(
            await receipt_of(await self.scope.database(), run_id, tenant=self.scope.tenant)
        )

    def watch(
        self, run_id: str, *, from_offset: int = 0, wait: float | None = None
    ) -> AsyncIterator[WatchItem]:
        """The run as it happens (events, model text), ending with its receipt when a
        database is configured; an ended run's story from the mirror."""
        return watching.watch(self.scope, run_id, from_offset=from_offset, wait=wait)

    async def pending_approvals(self, *, limit: int = 100) -> list[InboxItem]:
        """The approvals the caller's tenant's runs wait for, newest first, as the mirror
        shows them: each with its run, who the run is for, and its task (an inbox)."""
        return await Approvals(self.scope).inbox(limit=limit)

    async def step_record(self, run_id: str, step_id: str) -> MirroredStep | None:
        """One step of the run as mirrored (input, output, error); None until the mirror
        has it, and for another tenant's run."""
        row = await mirror_views.step_row(
            await self.scope.database(), run_id, step_id, tenant=self.scope.tenant
        )
        return None if row is None else MirroredStep.model_validate(row)

    async def version(self, run_id: str, *, wait: float | None = None) -> RunVersion:
        """The worker build the run is pinned to (all None on unversioned workers)."""
        wait = self.scope.bound(wait)
        client = await self.scope.temporal(wait)
        await self.scope.check_visible(run_id, wait)
        return await deployments.run_version(client, run_id)

    async def recent(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        engines_own: bool = True,
        agent: str | None = None,
        since: datetime | None = None,
    ) -> list[RunRow]:
        """Recent runs from the mirror, newest first: only those in `status`, of `agent`,
        started since `since`, as given; `engines_own=False` leaves out the runs the engine
        started for its own work (an eval's cases, sub-agents)."""
        rows = await mirror_views.recent_runs(
            await self.scope.database(),
            status=status,
            limit=limit,
            tenant=self.scope.tenant,
            engines_own=engines_own,
            agent=agent,
            since=since,
        )
        return [RunRow.model_validate(row) for row in rows]

    async def timeline(self, run_id: str, *, limit: int = 500) -> list[TimelineStep]:
        """The run's steps as mirrored, in order (its first `limit`): model turns, tool
        calls with their arguments and results, approvals with their decisions, each with
        its tokens and cost. Empty until the mirror has a step; another tenant's run reads
        as a missing one."""
        await self.scope.check_visible(run_id)
        rows = await mirror_views.timeline(
            await self.scope.database(), run_id, tenant=self.scope.tenant, limit=limit
        )
        return [TimelineStep.model_validate(row) for row in rows]

    async def unmirrored(
        self, *, status: str | None = None, limit: int = 50, wait: float | None = None
    ) -> list[RunRow]:
        """Open runs Temporal holds that the mirror has not seen yet (no worker has taken
        them), newest first, shaped as `recent` rows; none, with a warning logged, when
        Temporal does not answer within `wait`."""
        wait = self.scope.bound(wait)
        try:
            rows = await asyncio.wait_for(
                waiting_runs.unmirrored(self.scope, status=status, limit=limit, wait=wait), wait
            )
        except (ServiceUnreachable, RPCError, TimeoutError) as err:
            logger.warning("runs not yet mirrored are not listed: Temporal: %s", err)
            return []
        return [RunRow.model_validate(row) for row in rows]

    async def unserved_warning(self, *, wait: float | None = None) -> str | None:
        """Why a run just started may wait: no worker has polled its task queue lately."""
        wait = self.scope.bound(wait)
        return await waiting_runs.unserved(
            await self.scope.temporal(wait), self.scope.config.task_queue, seconds=wait
        )


async def _with_queue_position(client: Client, run_id: str, state: RunState) -> RunState:
    """A run waiting for its tenant's slot says where it stands in the queue."""
    if state.status == RunStatus.QUEUED and state.admission is not None:
        place = await admission.position(client, state.admission, run_id)
        state = state.model_copy(update={"queue_position": place.position if place else None})
    return state


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
            f"mirror is configured: `agentledger receipt {handle.id}` shows it once "
            "DATABASE_URL is set"
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
