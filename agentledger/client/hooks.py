"""`client.hooks`: signed webhook triggers.

An admin makes a hook in their tenant: a name, an agent, a task template (`{body.issue.title}`
filled in from each delivery) and a secret (given, or made and shown once). A delivery to
`POST /v1/hooks/TENANT.NAME` starts a run of the agent when its signature holds (GitHub's
`X-Hub-Signature-256`, or `AgentLedger-Signature` with its replay window), through the one
start gate every run comes in by (agentledger.client.starts): its tenant's policy and
budgets, as the hook (`hook:NAME`, a runner of the tenant). The delivery's id names the run,
so the same delivery sent again is that run. The tenant is the one the hook was made in:
nothing a delivery says decides it; an unknown hook answers exactly as a bad signature.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agentledger import profiles
from agentledger.client import starts
from agentledger.client.scope import DEFAULT_TENANT, Scope
from agentledger.core.access import Caller
from agentledger.core.constants import DEMO_AGENTS, FREE_FORM_AGENT
from agentledger.core.errors import (
    InvalidRequest,
    OperationRefused,
    RunNotFound,
    UnverifiedDelivery,
    problems,
)
from agentledger.core.hook_models import (
    HookRequest,
    HookRow,
    HookStarted,
    NewHook,
    parse_address,
    task_for,
    verified,
)
from agentledger.core.identity import Identity
from agentledger.core.results import TriggerOrigin
from agentledger.core.spec import RunSpec
from agentledger.core.webhook_signatures import BadSignature
from agentledger.store.trigger_store import TriggerStore

HOOKS_PATH = "/v1/hooks/"
# One refusal for a delivery that proves nothing: a bad signature, an unknown hook, another
# tenant's name alike, so hooks cannot be probed.
UNVERIFIED = "the delivery's signature does not verify for this hook"
NOBODYS_SECRET = secrets.token_urlsafe(32)


def no_hook(name: str) -> RunNotFound:
    return RunNotFound(f"no hook {name!r}: `agentledger hooks list` shows them")


class Hooks:
    """The caller's tenant's webhook triggers: made, listed and removed by its admins."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def create(
        self,
        name: str,
        *,
        task: str,
        agent: str | None = None,
        secret: str | None = None,
        tenant: str | None = None,
    ) -> NewHook:
        """A hook whose deliveries start runs of `agent` on `task` (a template over the
        delivery's JSON body); its secret, `secret` or one made now, is in the answer alone."""
        try:
            request = HookRequest(name=name, task=task, agent=agent, secret=secret)
        except ValidationError as err:
            raise InvalidRequest(f"invalid hook: {problems(err, 'hook')}") from err
        owner = self._admins(tenant)
        fields = self._profile(request.agent)
        try:
            RunSpec.model_validate({**fields, "task": "-"})
        except ValidationError as err:
            raise InvalidRequest(f"invalid run spec: {problems(err, 'spec')}") from err
        made = request.secret or secrets.token_urlsafe(32)
        hook = HookRow(
            tenant=owner,
            name=name,
            agent=str(fields.get("agent", FREE_FORM_AGENT)),
            task_template=request.task,
            spec=fields,
            created_by=self.scope.caller.identity.name,
        )
        if not await TriggerStore(await self.scope.database()).save_hook(hook, made):
            raise OperationRefused(
                f"a hook named {name!r} exists already: `agentledger hooks delete {name}` "
                "first, or choose another name"
            )
        return NewHook(hook=hook, path=HOOKS_PATH + hook.address, secret=made)

    async def listed(self, tenant: str | None = None) -> list[HookRow]:
        """The hooks of the caller's tenant (an operator's: every tenant's, or `tenant`'s)."""
        named = self.scope.acting_in(tenant)
        return await TriggerStore(await self.scope.database()).hooks(named)

    async def delete(self, name: str, *, tenant: str | None = None) -> str:
        owner = self._admins(tenant)
        if not await TriggerStore(await self.scope.database()).drop_hook(owner, name):
            raise no_hook(name)
        return f"hook {name} deleted: its deliveries are refused from now on"

    async def deliver(
        self, address: str, body: bytes, headers: Mapping[str, str], *, now: float | None = None
    ) -> HookStarted:
        """Start the run a delivery to the hook at `address` (`TENANT.NAME`) asks for, if its
        signature holds (UnverifiedDelivery if not: nothing starts); the same delivery
        again answers its run. `headers` with lower-case names."""
        found = parse_address(address)
        store = TriggerStore(await self.scope.database())
        hook = await store.hook(*found) if found and self.scope.sees(found[0]) else None
        # A hook that is not there is checked against a secret nobody holds: its refusal
        # says what a bad signature to a real hook says, so hooks cannot be probed.
        row, secret = hook if hook is not None else (None, NOBODYS_SECRET)
        try:
            delivery_id = verified(secret, body, headers, now=time.time() if now is None else now)
        except BadSignature as err:
            raise UnverifiedDelivery(f"{UNVERIFIED}: {err}") from err
        if row is None:
            raise UnverifiedDelivery(UNVERIFIED)
        earlier = await store.delivered(row.tenant, row.name, delivery_id)
        if earlier is not None:
            return HookStarted(run_id=earlier, existing=True, delivery_id=delivery_id)
        started = await self._start(row, body, delivery_id)
        await store.record_delivery(row.tenant, row.name, delivery_id, started.run_id)
        return started

    async def _start(self, hook: HookRow, body: bytes, delivery_id: str) -> HookStarted:
        try:
            payload: Any = json.loads(body)
            task = task_for(hook.task_template, payload)
        except (ValueError, RecursionError) as err:  # not JSON, too deep, no such field
            raise InvalidRequest(f"the delivery starts no run: {err}") from err
        as_hook = Caller(
            tenant=hook.tenant,
            roles=frozenset({"runner"}),
            identity=Identity(kind="hook", id=hook.name, name=f"hook:{hook.name}"),
            credential=f"hook:{hook.name}",
        )
        try:
            spec = RunSpec.model_validate(
                {
                    **hook.spec,
                    "task": task,
                    "tenant": hook.tenant,
                    "user": f"hook:{hook.name}",
                    "idempotency_key": f"hook.{hook.name}.{delivery_id}",
                }
            )
        except ValidationError as err:
            raise InvalidRequest(f"the delivery starts no run: {problems(err, 'spec')}") from err
        trigger = TriggerOrigin(kind="hook", name=hook.name, delivery_id=delivery_id)
        started = await starts.start(self.scope.acting_as(as_hook), spec, trigger=trigger)
        return HookStarted(
            run_id=started.run_id, existing=started.existing, delivery_id=delivery_id
        )

    # ------------------------------------------------------------ helpers

    def _admins(self, tenant: str | None) -> str:
        """The tenant an admin's act is in: hooks are made and removed by its admins (and
        operators)."""
        owner = self.scope.acting_in(tenant) or DEFAULT_TENANT
        if not self.scope.caller.may("admin"):
            raise OperationRefused("a tenant's hooks are its admins' to make and remove")
        return owner

    def _profile(self, agent: str | None) -> dict[str, Any]:
        """The agent's spec fields from the operator's profiles (none: the default run)."""
        if agent is None:
            return {}
        source = self.scope.config.agents or DEMO_AGENTS
        agents = profiles.load_agents(source)
        return profiles.pick(agents, agent, source).spec_fields(agents)
