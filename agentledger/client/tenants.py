"""`client.tenants`: who shares the stack, and the policy the gate enforces on each: a
tenant's weight and limits, set by an operator, listed for each tenant's own; and its
budgets (per day and per month, in USD and tokens, advisory or enforcing; its own or one of
its credentials'), set by an operator or the tenant's admin (agentledger.core.budgets).

Postgres holds the limits, so every starter reads the same ones; the server holds what it
enforces itself (each tenant's weight, and the model-call rates on the model queue), pushed
here on every change and by each worker at start (agentledger.temporal.queue_config).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio.service import RPCError

from agentledger.client import admission
from agentledger.client.scope import Scope, operators_only
from agentledger.core import bounds
from agentledger.core.admission_models import TenantLimits
from agentledger.core.budgets import BudgetLimit, BudgetStatus, Period
from agentledger.core.errors import (
    InvalidRequest,
    OperationRefused,
    PolicyDenied,
    TenantError,
    problems,
)
from agentledger.core.listings import TenantRow, TenantShown
from agentledger.core.policy_rules import TenantPolicy
from agentledger.store.budget_store import BudgetStore
from agentledger.store.tenant_store import TenantStore
from agentledger.temporal.queue_config import apply_queue_config


def problems_in(err: ValidationError) -> str:
    """A refused change's problems, each where it is."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in err.errors())


class Tenants:
    """Every tenant for an operator; the caller's own under AGENTLEDGER_TENANT."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def listed(self) -> list[TenantRow]:
        """Every tenant (the caller's alone under AGENTLEDGER_TENANT): its settings, runs in
        flight and queued."""
        rows = await TenantStore(await self.scope.database()).overview()
        return [TenantRow.model_validate(row) for row in rows if self.scope.sees(row["tenant"])]

    @operators_only("tenants set changes a tenant's share and limits")
    async def set(self, tenant: str, changes: dict[str, Any]) -> TenantLimits:
        """Change some of a tenant's settings (weight, max_in_flight, max_queued,
        model_calls_per_second, allowed_priorities; None removes a limit), keep the rest. An
        operator's act: a tenant's cap, weight and priorities are the policy the gate
        enforces on it, not its own to set. It takes effect for new starts at once, and for
        runs already queued too (a raised cap admits waiting runs)."""
        bounds.check_text("tenant", tenant)
        client = await self.scope.temporal()
        store = TenantStore(await self.scope.database())
        current = await store.limits(tenant)
        try:
            limits = TenantLimits.model_validate({**current.model_dump(), **changes})
        except ValidationError as err:
            raise TenantError(f"invalid tenant settings: {problems_in(err)}") from err
        await store.save(limits)
        rated = any(t.model_calls_per_second is not None for t in await store.all_limits())
        try:
            # Overrides for keys left out stay as they are: this tenant's are enough.
            await apply_queue_config(client, self.scope.config.task_queue, [limits], rated=rated)
        except RPCError as err:
            raise TenantError(
                f"saved {tenant}'s settings, but the server refused them ({err.message}); "
                "every worker pushes them again when it starts"
            ) from err
        await admission.configure(client, limits)
        return limits

    async def show(self, tenant: str | None = None) -> TenantShown:
        """One tenant (the caller's own under a tenant): its settings and runs, the policy
        its runs start under, and its budgets with what each spent this period."""
        named = self._policy_tenant(tenant)
        rows = await Tenants(self.scope.narrowed(named)).listed()
        return TenantShown(
            tenant=named,
            settings=rows[0] if rows else None,
            policy=await self.policy(named),
            budgets=await self.budgets(named),
        )

    async def policy(self, tenant: str | None = None) -> TenantPolicy:
        """The policy `tenant`'s runs start under (the caller's own under a tenant): agents,
        free-form specs, approval rules (agentledger.core.tenant_policy)."""
        named = self._policy_tenant(tenant)
        return await TenantStore(await self.scope.database()).rules(named)

    async def set_policy(self, tenant: str | None, changes: dict[str, Any]) -> TenantPolicy:
        """Change some of the policy `tenant`'s runs start under (`TenantPolicy`'s fields;
        the rest stay): an operator's act, or an admin's of its own tenant. New starts take
        it at once; runs already started keep the policy they started under."""
        named = self._policy_tenant(tenant)
        if not self.scope.caller.may("admin"):
            raise PolicyDenied("a tenant's policy is its admins' and the operators' to set")
        store = TenantStore(await self.scope.database())
        current = await store.rules(named)
        try:
            found = TenantPolicy.model_validate({**current.model_dump(), **changes})
        except ValidationError as err:
            raise TenantError(f"invalid tenant policy: {problems_in(err)}") from err
        await store.save_rules(named, found)
        return found

    def _policy_tenant(self, tenant: str | None) -> str:
        named = self.scope.acting_in(tenant)
        if named is None:
            raise InvalidRequest("name the tenant whose policy this is")
        return named

    async def budgets(self, tenant: str | None = None) -> list[BudgetStatus]:
        """The tenant's budgets (the caller's own tenant by default) and what each has spent
        in its current period."""
        named = self._tenant(tenant)
        store = BudgetStore(await self.scope.database())
        now = datetime.now(UTC)
        return [
            BudgetStatus.of(limit, await store.spend(limit, now), now)
            for limit in await store.limits(named)
        ]

    async def set_budget(
        self, tenant: str | None, period: Period, changes: dict[str, Any], *, subject: str = ""
    ) -> BudgetStatus | None:
        """Change the tenant's budget for `period` (`subject`: one of its credentials', else
        the whole tenant's): `usd`, `tokens` (None removes that limit) and `mode` (advisory
        or enforcing); the rest stays. With neither limit left, the budget is removed (None).
        An operator's act, or an admin's of its own tenant; starts and model calls read it
        at once."""
        named = self._tenant(tenant)
        if not self.scope.caller.may("admin"):
            raise OperationRefused("a tenant's budgets are its admins' and the operators' to set")
        store = BudgetStore(await self.scope.database())
        current = next(
            (b for b in await store.limits(named) if (b.subject, b.period) == (subject, period)),
            None,
        )
        base = current.model_dump() if current else {"tenant": named, "subject": subject}
        values = {"usd": None, "tokens": None, **base, "period": period, **changes}
        if values["usd"] is None and values["tokens"] is None:
            if current is None:
                raise TenantError(
                    f"{named} has no {period} budget{f' for {subject}' if subject else ''} yet: "
                    f"give its limit (--budget-{period} USD or --budget-{period}-tokens N)"
                )
            await store.remove(named, subject, period)
            return None
        try:
            limit = BudgetLimit.model_validate(values)
        except ValidationError as err:
            raise TenantError(f"invalid budget: {problems(err, 'budget')}") from err
        await store.save(limit)
        now = datetime.now(UTC)
        return BudgetStatus.of(limit, await store.spend(limit, now), now)

    def _tenant(self, tenant: str | None) -> str:
        """The tenant an act names, within the caller's scope (the caller's own by default)."""
        named = self.scope.acting_in(tenant)
        if named is None:
            raise TenantError("name the tenant (`--tenant`, or AGENTLEDGER_TENANT)")
        bounds.check_text("tenant", named)
        return named
