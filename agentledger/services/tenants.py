"""`client.tenants`: who shares the stack, and the policy the door enforces on each."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentledger.core import bounds
from agentledger.core.admission_models import TenantLimits
from agentledger.core.errors import InvalidRequest, PolicyDenied, TenantError
from agentledger.core.listings import TenantRow
from agentledger.core.policy_rules import TenantPolicy
from agentledger.ops import tenant_ops
from agentledger.services.client_session import ClientSession, operators_only
from agentledger.store.tenant_store import TenantStore


class Tenants:
    """Every tenant for an operator; the caller's own under AGENTLEDGER_TENANT."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def listed(self) -> list[TenantRow]:
        """Every tenant (the caller's alone under AGENTLEDGER_TENANT): its settings, runs in
        flight and queued."""
        rows = await tenant_ops.list_tenants(await self.session.database())
        mine = self.session.tenant
        return [TenantRow.model_validate(row) for row in rows if not mine or row["tenant"] == mine]

    @operators_only("tenants set changes a tenant's share and limits")
    async def set(self, tenant: str, changes: dict[str, Any]) -> TenantLimits:
        """Change some of a tenant's settings (weight, max_in_flight, max_queued,
        model_calls_per_second, allowed_priorities; None removes a limit), keep the rest. An
        operator's act: a tenant's cap, weight and priorities are the policy the door
        enforces on it, not its own to set."""
        return await tenant_ops.set_tenant(
            await self.session.temporal(),
            await self.session.database(),
            tenant,
            changes,
            task_queue=self.session.settings.task_queue,
        )

    async def policy(self, tenant: str | None = None) -> TenantPolicy:
        """The operator's policy for `tenant`'s runs (the caller's own under a tenant):
        agents, free-form specs, approval rules (docs/security.md, "The policy model")."""
        named = self._policy_tenant(tenant)
        return await TenantStore(await self.session.database()).rules(named)

    async def set_policy(self, tenant: str | None, changes: dict[str, Any]) -> TenantPolicy:
        """Change some of the policy for `tenant`'s runs (`TenantPolicy`'s fields; the rest
        stay): an operator's act, or an admin's of its own tenant. New starts take it at
        once; runs already started keep the policy they started under."""
        named = self._policy_tenant(tenant)
        caller = self.session.caller
        if caller is not None and not caller.may("admin"):
            raise PolicyDenied("a tenant's policy is its admins' and the operators' to set")
        store = TenantStore(await self.session.database())
        current = await store.rules(named)
        try:
            found = TenantPolicy.model_validate({**current.model_dump(), **changes})
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'policy'}: {e['msg']}" for e in err.errors()
            )
            raise TenantError(f"invalid tenant policy: {problems}") from err
        await store.save_rules(named, found)
        return found

    def _policy_tenant(self, tenant: str | None) -> str:
        named = self.session.scope(tenant)
        if named is None:
            raise InvalidRequest("name the tenant whose policy this is")
        bounds.check_text("tenant", named)
        return named
