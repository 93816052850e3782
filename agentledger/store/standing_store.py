"""Standing approvals in Postgres (agentledger.core.standing_approvals says what one is).

Every read names its tenant: another tenant's rule is never found, listed or revoked. A
revoked or expired rule stays, for the receipts that name it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.identity import Identity
from agentledger.core.standing_approvals import StandingApproval

COLUMNS = (
    'rule_id, tenant, tool, condition AS "when", run_id, agent, granted_by, granter_roles, '
    "granted_at, expires_at, revoked_at, revoked_by"
)


def _rule(row: dict[str, Any]) -> StandingApproval:
    return StandingApproval.model_validate(row)


class StandingStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def grant(self, rule: StandingApproval) -> StandingApproval:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""INSERT INTO standing_approvals (rule_id, tenant, tool, condition, run_id,
                        agent, granted_by, granter_roles, granted_at, expires_at)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {COLUMNS}""",
                (
                    rule.rule_id,
                    rule.tenant,
                    rule.tool,
                    rule.when,
                    rule.run_id,
                    rule.agent,
                    Jsonb(rule.granted_by.model_dump(mode="json")),
                    rule.granter_roles,
                    rule.granted_at,
                    rule.expires_at,
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            return _rule(row)

    async def listed(self, tenant: str, *, live_only: bool) -> list[StandingApproval]:
        """The tenant's rules, newest first; with `live_only`, those still approving."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""SELECT {COLUMNS} FROM standing_approvals WHERE tenant = %s
                      AND (NOT %s OR (revoked_at IS NULL AND expires_at > now()))
                    ORDER BY granted_at DESC LIMIT 500""",
                (tenant, live_only),
            )
            return [_rule(row) for row in await cur.fetchall()]

    async def live_for(self, tenant: str, tool: str) -> list[StandingApproval]:
        """The tenant's rules that may approve a call of `tool` now."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""SELECT {COLUMNS} FROM standing_approvals
                    WHERE tenant = %s AND tool = %s AND revoked_at IS NULL
                      AND expires_at > now()
                    ORDER BY granted_at""",
                (tenant, tool),
            )
            return [_rule(row) for row in await cur.fetchall()]

    async def revoke(
        self, tenant: str, rule_id: str, by: Identity, at: datetime
    ) -> StandingApproval | None:
        """The rule, revoked now (or when it was, if it was already); None: the tenant has
        no such rule."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""UPDATE standing_approvals SET revoked_at = coalesce(revoked_at, %s),
                        revoked_by = coalesce(revoked_by, %s)
                    WHERE tenant = %s AND rule_id = %s RETURNING {COLUMNS}""",
                (at, Jsonb(by.model_dump(mode="json")), tenant, rule_id),
            )
            row = await cur.fetchone()
            return None if row is None else _rule(row)
