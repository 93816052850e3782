"""`client.standing`: standing approvals, granted, listed and revoked within the caller's
tenant (agentledger.core.standing_approvals says what one covers).

An approver grants a rule only within the tenant's policy: a tool its policy lets approvers
grant (`tenants set --standing-tools`), never one it always asks about, for at most
`--standing-max-hours`. A rule scoped to a run names one of the tenant's runs (another
tenant's reads as missing); another tenant's rule reads as missing when revoked.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from agentledger.client.scope import Scope
from agentledger.core import bounds
from agentledger.core.errors import InvalidRequest, PolicyDenied, RuleNotFound
from agentledger.core.policy_rules import parse_condition
from agentledger.core.standing_approvals import StandingApproval
from agentledger.store.standing_store import StandingStore
from agentledger.store.tenant_store import TenantStore


class StandingApprovals:
    """The caller's tenant's standing approvals."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _tenant(self, tenant: str | None) -> str:
        named = self.scope.acting_in(tenant)
        if named is None:
            raise InvalidRequest("name the tenant whose standing approvals these are (--tenant)")
        bounds.check_text("tenant", named)
        return named

    async def grant(
        self,
        tool: str,
        *,
        hours: float,
        when: str | None = None,
        run_id: str | None = None,
        agent: str | None = None,
        tenant: str | None = None,
    ) -> StandingApproval:
        """Approve `tool`'s calls (those `when` holds of, in run `run_id` or agent `agent`'s
        runs if named) for the next `hours`, as the caller: an approver's act, within what
        the tenant's policy lets approvers grant."""
        named = self._tenant(tenant)
        caller = self.scope.caller
        if not caller.may("approver"):
            raise PolicyDenied("a standing approval is an approver's to grant")
        for name, text in (("tool", tool), ("agent", agent), ("when", when)):
            if text is not None:
                bounds.check_text(name, text)
        if when is not None:
            try:
                parse_condition(when)
            except ValueError as err:
                raise InvalidRequest(str(err)) from err
        policy = await TenantStore(await self.scope.database()).rules(named)
        if tool in policy.always_ask:
            raise PolicyDenied(
                f"the tenant's policy always asks a person about {tool}: no standing approval "
                "covers it"
            )
        if not policy.may_grant(tool):
            allowed = ", ".join(policy.standing_tools) or "none"
            raise PolicyDenied(
                f"the tenant's policy lets approvers grant standing approvals for {allowed}, "
                f"not {tool}; an admin allows more with `agentledger tenants set TENANT "
                f"--standing-tools {tool}`"
            )
        if not 0 < hours <= policy.standing_max_hours:
            raise PolicyDenied(
                f"a standing approval lasts more than 0 and at most "
                f"{policy.standing_max_hours:g} hours under the tenant's policy, not {hours:g}"
            )
        if run_id is not None:
            await self.scope.narrowed(named).check_visible(run_id)
        now = datetime.now(UTC)
        # The roles its granter decides in: an admin decides as an approver too.
        roles = {*caller.roles, "approver"}
        rule = StandingApproval(
            rule_id="sa-" + secrets.token_hex(8),
            tenant=named,
            tool=tool,
            when=when,
            run_id=run_id,
            agent=agent,
            granted_by=caller.identity,
            granter_roles=sorted(roles),
            granted_at=now,
            expires_at=now + timedelta(hours=hours),
        )
        return await StandingStore(await self.scope.database()).grant(rule)

    async def listed(
        self, *, tenant: str | None = None, live_only: bool = True
    ) -> list[StandingApproval]:
        """The tenant's standing approvals, newest first (with `live_only`, those still
        approving; else revoked and expired ones too)."""
        named = self._tenant(tenant)
        return await StandingStore(await self.scope.database()).listed(named, live_only=live_only)

    async def revoke(self, rule_id: str, *, tenant: str | None = None) -> StandingApproval:
        """Stop the rule approving: calls it covered ask a person again."""
        named = self._tenant(tenant)
        bounds.check_text("rule_id", rule_id)
        if not self.scope.caller.may("approver"):
            raise PolicyDenied("a standing approval is an approver's to revoke")
        revoked = await StandingStore(await self.scope.database()).revoke(
            named, rule_id, self.scope.caller.identity, datetime.now(UTC)
        )
        if revoked is None:
            raise RuleNotFound(f"no standing approval {rule_id}")
        return revoked
