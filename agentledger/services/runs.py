"""`client.runs`: start a run, act on it (decide, pause, say, cancel) and read it (state,
receipt, its story as it happens), each through the door (agentledger/ops/door.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

from temporalio.service import RPCError

from agentledger.core.access import Caller
from agentledger.core.approver_key import ApproverKey
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import InvalidRequest, PolicyDenied, ServiceUnreachable
from agentledger.core.identity import OPERATOR, Identity
from agentledger.core.listings import InboxItem, MirroredStep, RunRow
from agentledger.core.results import (
    ControlResult,
    DecisionResult,
    PendingApproval,
    Receipt,
    RunResult,
    RunState,
    RunVersion,
    SayResult,
    WatchItem,
)
from agentledger.core.run_reports import RunReport, Started
from agentledger.core.settings import Settings
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.ops import door, fork_ops, steering_ops, waiting_runs, watch
from agentledger.ops import operations as ops
from agentledger.profiles import Agent, load_agents
from agentledger.services.client_session import ClientSession
from agentledger.store import mirror_views
from agentledger.temporal import deployments
from agentledger.temporal.worker_presence import Deadline

logger = logging.getLogger(__name__)


class Runs:
    """The caller's runs: another tenant's reads as a missing one."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    # ------------------------------------------------------------ starting runs

    async def start(
        self,
        task: str | None = None,
        *,
        agent: Agent | None = None,
        spec: RunSpec | None = None,
        require_tools: bool | None = None,
        wait: float | None = None,
        **fields: Any,
    ) -> Started:
        """Start a run: `spec`, or one made of `agent`'s profile with `task` and `fields`
        (any run-spec field, e.g. `idempotency_key`) over it, or of those alone. Returns its
        id, whether it existed already (the same idempotency key: then it is the same run)
        and its place in its tenant's queue. The run takes its tenant (the caller's, unless
        the spec names one), approvers, cap and weight from the database
        (agentledger/ops/door.py); without one, the start is refused. With `require_tools` (by
        default, for an agent's run), a run naming a tool its task queue's workers lack is
        refused before it starts; with `wait`, a start no worker could take within it (a
        capped tenant's) is not sent at all."""
        if spec is None:
            if task is not None:
                fields["task"] = task
            spec = agent.spec(**fields) if agent is not None else RunSpec.model_validate(fields)
        elif task is not None or agent is not None or fields:
            raise InvalidRequest("pass spec=, or a task, agent and run-spec fields, not both")
        session = self.session
        pool = await session.mirror()
        if (agent is not None if require_tools is None else require_tools) and spec.allowed_tools:
            await ops.require_tools(
                pool or await session.database(), session.settings.task_queue, spec.allowed_tools
            )
        if session.tenant is not None and "tenant" not in spec.model_fields_set:
            spec = spec.model_copy(update={"tenant": session.tenant})
        who = session.who(spec.tenant)
        return await door.start(
            await session.temporal(),
            pool,
            spec,
            task_queue=session.settings.task_queue,
            indexed=session.settings.search_attributes,
            acting_tenant=session.tenant,
            requester=who.identity,
            roles=who.roles,
            profiles=operator_profiles(session.settings),
            wait=wait,
        )

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
        session = self.session
        return await fork_ops.fork_run(
            await session.temporal(),
            await session.database(),
            run_id,
            from_step=from_step,
            edit_output=edit_output,
            key=key,
            task_queue=session.settings.task_queue,
            indexed=session.settings.search_attributes,
            tenant=session.tenant,
            requester=session.who(session.tenant or door.DEFAULT_TENANT).identity,
            profiles=operator_profiles(session.settings),
        )

    def id_of(self, key: str) -> str:
        """The id of the run the caller's tenant starts with idempotency key `key` (it may
        not exist): how a caller finds again a run it named."""
        return door.run_id(self.session.tenant or door.DEFAULT_TENANT, key)

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
        that one), as the caller: an authenticated caller (the HTTP door's) decides as its
        credential proves, only an approval whose role it holds; with `signer`
        (`client.approvers.key(name)`) the decision is signed with that key and made in its
        role, as runs with keyed approvers require; else as the operator. `edit` is a JSON
        Merge Patch of the arguments (RFC 7396: null removes), `replace` the whole
        arguments instead; with `action_hash`, the decision holds only if the pending action
        is still that one."""
        return await self.session.act(
            ops.approve,
            run_id,
            edit=edit,
            replace=replace,
            action_hash=action_hash,
            wait=wait,
            signer=signer,
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
        return await self.session.act(
            ops.reject,
            run_id,
            reason=reason,
            action_hash=action_hash,
            wait=wait,
            signer=signer,
            **self._decider(by, role, signer),
        )

    def _decider(self, by: str, role: str | None, signer: ApproverKey | None) -> dict[str, Any]:
        """Who decides, and in which role: the authenticated caller's credential, an
        approver's key, or the operator (`by` saying for whom)."""
        caller = self.session.caller
        if caller is not None:
            return {
                "by": caller.identity.name,
                "role": role,
                "decider": caller.identity,
                "judge": functools.partial(_judge, caller),
            }
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
        return {"by": by, "role": role, "decider": OPERATOR}

    async def pause(self, run_id: str, *, wait: float | None = None) -> ControlResult:
        """Pause at the next step boundary (recorded for later while no worker runs)."""
        return await self.session.act(ops.control, run_id, "pause", wait=wait)

    async def resume(self, run_id: str, *, wait: float | None = None) -> ControlResult:
        return await self.session.act(ops.control, run_id, "resume", wait=wait)

    async def say(
        self,
        run_id: str,
        text: str,
        *,
        by: str = "cli",
        message_id: str | None = None,
        wait: float | None = None,
    ) -> SayResult:
        """Tell a run in flight something: it reads the message at its next model call, or,
        with `on_message: interrupt`, replans with it at once (kept while no worker runs)."""
        return await self.session.act(
            steering_ops.say, run_id, text, by=by, message_id=message_id, wait=wait
        )

    async def cancel(self, run_id: str, *, wait: float | None = None) -> str:
        """End the run as cancelled (it writes its receipt); returns what happened."""
        return await self.session.act(ops.cancel, run_id, wait=wait)

    # ------------------------------------------------------------ reading a run

    async def status(self, run_id: str, *, wait: float | None = None) -> RunState:
        """The live state, from the run itself (a worker answers)."""
        return await self.session.act(ops.status, run_id, wait=wait)

    async def inspect(self, run_id: str, *, wait: float | None = None) -> RunReport:
        """The state with where it came from: the run itself, or the mirror while no worker
        answers; who serves the run and when it last moved."""
        return await self.session.act(ops.inspect, run_id, wait=wait)

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run to end."""
        return await ops.result(
            await self.session.temporal(),
            run_id,
            tenant=self.session.tenant,
            mirror=await self.session.mirror(),
        )

    async def receipt(self, run_id: str) -> Receipt:
        """What the run did, cost and changed: written when it ended, with the forks made of
        it since and its sandbox executions."""
        return Receipt.model_validate(
            await ops.receipt(await self.session.database(), run_id, tenant=self.session.tenant)
        )

    def watch(
        self, run_id: str, *, from_offset: int = 0, wait: float | None = None
    ) -> AsyncIterator[WatchItem]:
        """The run as it happens (events, model text), ending with its receipt when a
        database is configured; an ended run's story from the mirror."""
        return self._watch(run_id, from_offset, self.session.bound(wait))

    async def _watch(self, run_id: str, from_offset: int, wait: float) -> AsyncIterator[WatchItem]:
        client = await self.session.temporal(wait)
        pool = await self.session.mirror()
        items = watch.watch(
            client, run_id, pool=pool, from_offset=from_offset, tenant=self.session.tenant
        )
        async for item in items:
            yield item

    async def pending_approvals(self, *, limit: int = 100) -> list[InboxItem]:
        """The approvals the caller's tenant's runs wait for, newest first, as the mirror
        shows them: each with its run, who the run is for, and its task (an inbox)."""
        rows = await mirror_views.pending_approvals(
            await self.session.database(), tenant=self.session.tenant, limit=limit
        )
        return [InboxItem.model_validate(row) for row in rows]

    async def step_record(self, run_id: str, step_id: str) -> MirroredStep | None:
        """One step of the run as mirrored (input, output, error); None until the mirror
        has it, and for another tenant's run."""
        row = await mirror_views.step_row(
            await self.session.database(), run_id, step_id, tenant=self.session.tenant
        )
        return None if row is None else MirroredStep.model_validate(row)

    async def version(self, run_id: str, *, wait: float | None = None) -> RunVersion:
        """The worker build the run is pinned to (all None on unversioned workers)."""
        wait = self.session.bound(wait)
        client = await self.session.temporal(wait)
        if self.session.tenant is not None:  # another tenant's run reads as a missing one
            await ops.find_run(
                client,
                run_id,
                Deadline(wait),
                tenant=self.session.tenant,
                mirror=await self.session.mirror(),
            )
        return await deployments.run_version(client, run_id)

    async def recent(self, *, status: str | None = None, limit: int = 50) -> list[RunRow]:
        """Recent runs from the mirror, newest first."""
        rows = await ops.list_runs(
            await self.session.database(), status=status, limit=limit, tenant=self.session.tenant
        )
        return [RunRow.model_validate(row) for row in rows]

    async def unmirrored(
        self, *, status: str | None = None, limit: int = 50, wait: float | None = None
    ) -> list[RunRow]:
        """Open runs Temporal holds that the mirror has not seen yet (no worker has taken
        them), newest first, shaped as `recent` rows; none, with a warning logged, when
        Temporal does not answer within `wait`."""
        wait = self.session.bound(wait)
        try:
            rows = await asyncio.wait_for(
                waiting_runs.unmirrored(
                    await self.session.temporal(wait),
                    await self.session.database(),
                    tenant=self.session.tenant,
                    status=status,
                    limit=limit,
                ),
                wait,
            )
        except (ServiceUnreachable, RPCError, TimeoutError) as err:
            logger.warning("runs not yet mirrored are not listed: Temporal: %s", err)
            return []
        return [RunRow.model_validate(row) for row in rows]

    async def unserved_warning(self, *, wait: float | None = None) -> str | None:
        """Why a run just started may wait: no worker has polled its task queue lately."""
        wait = self.session.bound(wait)
        return await waiting_runs.unserved(
            await self.session.temporal(wait), self.session.settings.task_queue, seconds=wait
        )


def _judge(caller: Caller, pending: PendingApproval) -> None:
    """A credential decides an approval only in a role it holds: the approval's, never one
    the request names."""
    if not caller.decides_as(pending.required_role):
        held = ", ".join(sorted(caller.roles)) or "no role"
        raise PolicyDenied(
            f"{pending.tool} needs an approver in role {pending.required_role!r}; this "
            f"credential decides as {held} (an operator gives a key more with `agentledger "
            f"keys create --decides {pending.required_role}`)"
        )


def operator_profiles(settings: Settings) -> dict[str, JsonDict]:
    """The operator's agent profiles (AGENTLEDGER_AGENTS, else the demo's) as the run-spec
    fields each sets: what the door holds a run naming one to."""
    source = settings.agents or DEMO_AGENTS
    agents = load_agents(source)
    return {name: agent.spec_fields(agents) for name, agent in agents.items()}
