"""`client.schedules`: runs that start themselves, on Temporal Schedules.

A schedule is a Temporal Schedule in its tenant (id `schedule-TENANT~NAME`: another tenant's
reads as missing), listed in the mirror with what became of each fire. Its action starts a
`ScheduledFire` workflow per fire time, which starts the run as any workflow starts one:
under the tenant's policy read at that moment (agentledger.workflows.scheduled_fires),
with the spec held to the tenant's policy here when the schedule is made
(`starts.triggered`). Its fires are charged to `schedule:NAME` beside the tenant. Who may
make a tenant's schedules is its policy's (`tenants set T --schedule-role runner`; admins
by default); anyone who sees the tenant's runs may read them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from agentledger import profiles
from agentledger.client import starts
from agentledger.client.scope import DEFAULT_TENANT, Scope
from agentledger.core import constants as names
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import InvalidRequest, OperationRefused, RunNotFound, problems
from agentledger.core.schedule_models import (
    FireInput,
    Overlap,
    ScheduleRequest,
    ScheduleRow,
    ScheduleView,
    fire_workflow_id,
    schedule_id,
)
from agentledger.core.spec import RunSpec
from agentledger.store.tenant_store import TenantStore
from agentledger.store.trigger_store import TriggerStore

OVERLAP: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
}
RECENT_FIRES = 10


def no_schedule(name: str) -> RunNotFound:
    """A schedule that is not there, and another tenant's, alike."""
    return RunNotFound(f"no schedule {name!r}: `agentledger schedule list` shows them")


class Schedules:
    """The caller's tenant's schedules (an operator names the tenant, else the default)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def create(
        self,
        name: str,
        *,
        task: str,
        agent: str | None = None,
        cron: str | None = None,
        every: float | None = None,
        overlap: Overlap = "skip",
        catchup: float | None = None,
        jitter: float | None = None,
        paused: bool = False,
        tenant: str | None = None,
    ) -> ScheduleView:
        """A schedule that starts a run of `agent` on `task` at each fire: on the `cron`
        expression, or `every` so many seconds (spans in seconds: `catchup`, how late a fire
        the server missed may still run; `jitter`, how late each may be). `overlap` says
        what a fire does while the last one's run is busy."""
        try:
            request = ScheduleRequest(
                name=name,
                task=task,
                agent=agent,
                cron=cron,
                every_seconds=every,
                overlap=overlap,
                catchup_seconds=catchup,
                jitter_seconds=jitter,
                paused=paused,
            )
        except ValidationError as err:
            raise InvalidRequest(f"invalid schedule: {problems(err, 'schedule')}") from err
        owner = self._tenant(tenant)
        await self._may_make(owner)
        spec = await starts.triggered(self.scope, self._spec(request, owner))
        fire = FireInput(tenant=owner, schedule=name, spec=spec, charged_to=f"schedule:{name}")
        client = await self.scope.temporal()
        try:
            await client.create_schedule(
                schedule_id(owner, name),
                Schedule(
                    action=ScheduleActionStartWorkflow(
                        names.SCHEDULED_FIRE_WORKFLOW_NAME,
                        fire,
                        id=fire_workflow_id(owner, name),
                        task_queue=self.scope.config.task_queue,
                    ),
                    spec=_when(request),
                    policy=SchedulePolicy(
                        overlap=OVERLAP[overlap],
                        catchup_window=_span(catchup),
                    ),
                    state=ScheduleState(paused=paused, note="made paused" if paused else None),
                ),
                memo={"tenant": owner, "name": name},
                rpc_timeout=timedelta(seconds=self.scope.wait),
            )
        except ScheduleAlreadyRunningError as err:
            raise OperationRefused(
                f"a schedule named {name!r} exists already: `agentledger schedule delete "
                f"{name}` first, or choose another name"
            ) from err
        except RPCError as err:
            if err.status == RPCStatusCode.INVALID_ARGUMENT:
                raise InvalidRequest(f"Temporal refused the schedule: {err.message}") from err
            raise
        await TriggerStore(await self.scope.database()).save_schedule(
            owner, request, spec.agent, self.scope.caller.identity.name
        )
        return await self.show(name, tenant=owner)

    async def listed(self, tenant: str | None = None) -> list[ScheduleRow]:
        """The schedules the mirror lists: the caller's tenant's (an operator's: every
        tenant's, or `tenant`'s)."""
        named = self.scope.acting_in(tenant)
        rows = await TriggerStore(await self.scope.database()).schedules(named)
        return [_row(row) for row in rows]

    async def show(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        """The schedule: its settings, its state in Temporal (next fires, fires made and
        skipped while a run was busy), and its latest fires from the mirror."""
        owner = self._tenant(tenant)
        store = TriggerStore(await self.scope.database())
        row = next((r for r in await store.schedules(owner) if r["name"] == name), None)
        if row is None:
            raise no_schedule(name)
        request = ScheduleRequest.model_validate(row["request"])
        described = await (await self._handle(owner, name)).describe(
            rpc_timeout=timedelta(seconds=self.scope.wait)
        )
        info, state = described.info, described.schedule.state
        return ScheduleView(
            **request.model_dump(exclude={"name", "task", "agent", "paused"}),
            name=name,
            tenant=owner,
            agent=row["agent"],
            task=request.task,
            paused=state.paused,
            note=state.note,
            next_fires=list(info.next_action_times),
            fires=info.num_actions,
            skipped_busy=info.num_actions_skipped_overlap,
            missed=info.num_actions_missed_catchup_window,
            recent=await store.fires(owner, name, RECENT_FIRES),
        )

    async def pause(
        self, name: str, *, note: str | None = None, tenant: str | None = None
    ) -> ScheduleView:
        """No fire until it is resumed (fires due meanwhile are not made up)."""
        owner = self._tenant(tenant)
        await self._may_make(owner)
        handle = await self._handle(owner, name)
        await handle.pause(note=note or f"paused by {self.scope.caller.identity.name}")
        await TriggerStore(await self.scope.database()).set_paused(owner, name, True)
        return await self.show(name, tenant=owner)

    async def resume(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        owner = self._tenant(tenant)
        await self._may_make(owner)
        handle = await self._handle(owner, name)
        await handle.unpause(note=f"resumed by {self.scope.caller.identity.name}")
        await TriggerStore(await self.scope.database()).set_paused(owner, name, False)
        return await self.show(name, tenant=owner)

    async def trigger(self, name: str, *, tenant: str | None = None) -> ScheduleView:
        """Fire now, once, as the schedule's overlap policy allows."""
        owner = self._tenant(tenant)
        await self._may_make(owner)
        await (await self._handle(owner, name)).trigger()
        return await self.show(name, tenant=owner)

    async def backfill(
        self, name: str, start: datetime, end: datetime, *, tenant: str | None = None
    ) -> ScheduleView:
        """Make the fires the schedule would have made from `start` to `end`."""
        if end <= start:
            raise InvalidRequest("a backfill runs from a time to a later one")
        owner = self._tenant(tenant)
        await self._may_make(owner)
        await (await self._handle(owner, name)).backfill(ScheduleBackfill(start, end))
        return await self.show(name, tenant=owner)

    async def delete(self, name: str, *, tenant: str | None = None) -> str:
        """Remove the schedule: no fire after this; runs it started go on."""
        owner = self._tenant(tenant)
        await self._may_make(owner)
        await (await self._handle(owner, name)).delete()
        await TriggerStore(await self.scope.database()).drop_schedule(owner, name)
        return f"schedule {name} deleted; runs it started go on"

    # ------------------------------------------------------------ helpers

    def _tenant(self, tenant: str | None) -> str:
        return self.scope.acting_in(tenant) or DEFAULT_TENANT

    async def _may_make(self, tenant: str) -> None:
        """The tenant's policy says who may make and change its schedules."""
        caller = self.scope.caller
        limits = await TenantStore(await self.scope.database()).limits(tenant)
        role = limits.schedule_role or "admin"
        if not caller.may(role):
            raise OperationRefused(
                f"tenant {tenant!r} lets its {role}s make and change its schedules; an "
                f"operator changes that with `agentledger tenants set {tenant} --schedule-role "
                "runner`"
            )

    async def _handle(self, tenant: str, name: str) -> ScheduleHandle:
        """The schedule's handle, once Temporal says it is there."""
        client = await self.scope.temporal()
        handle = client.get_schedule_handle(schedule_id(tenant, name))
        try:
            await handle.describe(rpc_timeout=timedelta(seconds=self.scope.wait))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise no_schedule(name) from err
            raise
        return handle

    def _spec(self, request: ScheduleRequest, tenant: str) -> RunSpec:
        """The run's spec: the agent's profile (the operator's) with the task over it."""
        fields: dict[str, Any] = {}
        if request.agent is not None:
            source = self.scope.config.agents or DEMO_AGENTS
            agents = profiles.load_agents(source)
            fields = profiles.pick(agents, request.agent, source).spec_fields(agents)
        try:
            return RunSpec.model_validate(
                {**fields, "task": request.task, "tenant": tenant, "user": "schedule"}
            )
        except ValidationError as err:
            raise InvalidRequest(f"invalid run spec: {problems(err, 'schedule')}") from err


def _when(request: ScheduleRequest) -> ScheduleSpec:
    jitter = _span(request.jitter_seconds)
    if request.cron is not None:
        return ScheduleSpec(cron_expressions=[request.cron], jitter=jitter)
    assert request.every_seconds is not None
    every = ScheduleIntervalSpec(every=timedelta(seconds=request.every_seconds))
    return ScheduleSpec(intervals=[every], jitter=jitter)


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _row(row: dict[str, Any]) -> ScheduleRow:
    request = ScheduleRequest.model_validate(row["request"])
    return ScheduleRow(
        **{k: row[k] for k in ScheduleRow.model_fields if k in row and k != "overlap"},
        when=request.when,
        overlap=request.overlap,
    )
