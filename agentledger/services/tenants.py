"""`client.tenants`: who shares the stack, and the policy the door enforces on each."""

from __future__ import annotations

from typing import Any

from agentledger.core.admission_models import TenantLimits
from agentledger.core.listings import TenantRow
from agentledger.ops import tenant_ops
from agentledger.services.client_session import ClientSession, operators_only


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
