"""Standing approvals: a rule an approver grants instead of one decision ("refund_order
while `cents <= 2000`, for the next hour"; "this run"; "this agent"), within what the
tenant's policy lets approvers grant (`TenantPolicy.standing_tools`, `standing_max_hours`,
`always_ask`). Public.

A rule covers a call when it is live (granted, not revoked, not expired), names the call's
tool, its condition holds of the call's arguments (the condition language of tenant rules,
agentledger.core.policy_rules; an undecidable condition does not cover: a standing
approval fails closed, the other way from a rule that asks for more), it is scoped to the
call's run or agent if it names one, and its granter decides in the role the call needs.
It never covers a call that needs more than one approver, nor a tool the tenant's policy or
the run's own approval policy always asks for. The run checks this in workflow code over
what an activity read from Postgres, so a replay reads the same answer.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from agentledger.core.identity import Identity
from agentledger.core.policy_rules import Condition, condition_proven
from agentledger.core.spec import JsonDict


class StandingApproval(BaseModel):
    """One granted rule, as Postgres keeps it and `approvals list` shows it."""

    model_config = ConfigDict(frozen=True)

    rule_id: str = Field(description="the rule's id: revoke it by this")
    tenant: str = Field(description="the tenant whose runs it covers")
    tool: str = Field(description="the tool whose calls it approves")
    when: Condition | None = Field(None, description="a condition on the arguments")
    run_id: str | None = Field(None, description="only this run's calls (a session's); null: any")
    agent: str | None = Field(None, description="only this agent's runs; null: any")
    granted_by: Identity = Field(description="who granted it, as their credential proved it")
    granter_roles: list[str] = Field(
        default_factory=list, description="the roles its granter decided in when granting it"
    )
    granted_at: datetime = Field(description="when it was granted")
    expires_at: datetime = Field(description="when it stops approving")
    revoked_at: datetime | None = Field(None, description="when it was revoked; null: it was not")
    revoked_by: Identity | None = Field(None, description="who revoked it")

    def live(self, at: datetime) -> bool:
        return self.revoked_at is None and at < self.expires_at

    def covers(
        self,
        tool: str,
        arguments: JsonDict,
        *,
        run_id: str,
        agent: str,
        required_role: str,
        at: datetime,
    ) -> bool:
        """Whether this rule approves the call (a person would have been asked)."""
        if not self.live(at) or tool != self.tool:
            return False
        if self.run_id is not None and self.run_id != run_id:
            return False
        if self.agent is not None and self.agent != agent:
            return False
        if required_role not in self.granter_roles:
            return False
        return self.when is None or condition_proven(self.when, arguments)

    def text(self) -> str:
        """The rule in words, as the inbox, the CLI and a receipt name it."""
        parts = [self.tool]
        if self.when:
            parts.append(f"when {self.when}")
        if self.run_id:
            parts.append(f"in run {self.run_id}")
        if self.agent:
            parts.append(f"for agent {self.agent}")
        return " ".join(parts)


class StandingInput(BaseModel):
    """Activity `approvals.standing`: the tenant's live rules for this call's tool."""

    tenant: str
    tool: str


class StandingFound(BaseModel):
    rules: list[StandingApproval] = Field(default_factory=list)
