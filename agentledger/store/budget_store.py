"""All SQL for budgets above a run: the limits operators set, what has been spent against
them, the model calls admitted and not yet landed, the alerts raised, and what things cost.

What was spent is the model journal (agentledger.store.model_journal): every response a
model call paid for is journaled once, under the tenant, credential and agent it was charged
to, so a budget, `agentledger costs` and the receipts read one ledger. A model call under an
enforcing budget is admitted in one transaction that locks its budgets' rows, so two
admissions of one tenant are decided one after the other, never on the same spend; the call
holds its place (`budget_holds`) until its response is journaled, or until its step's
timeout passes (a worker that died mid-call).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool

from agentledger.core import budgets
from agentledger.core.budgets import Admission, BudgetLimit, Spend
from agentledger.core.wire import Charge

LIMIT_COLUMNS = ("tenant", "subject", "period", "usd", "tokens", "mode")
SPENT = """SELECT coalesce(sum(tokens_in + tokens_out), 0)::bigint,
                  coalesce(sum(cost_usd), 0)::float8,
                  coalesce(max(tokens_in + tokens_out), 0)::bigint,
                  coalesce(max(tokens_out), 0)::bigint
           FROM model_journal
           WHERE tenant = %(tenant)s AND created_at >= %(start)s
             AND (%(subject)s = '' OR charged_to = %(subject)s)"""
IN_FLIGHT = """SELECT count(*), coalesce(sum(tokens), 0)::bigint,
                      coalesce(sum(usd), 0)::float8
               FROM budget_holds
               WHERE tenant = %(tenant)s AND expires_at > now()
                 AND (%(subject)s = '' OR charged_to = %(subject)s)
                 AND NOT (run_id = %(run)s AND step_id = %(step)s)"""
# What `costs` groups by, each as SQL over the journal (j) and the mirror's run row (r), for
# responses journaled before the journal named its tenant and agent.
DIMENSIONS = {
    "tenant": "coalesce(j.tenant, r.tenant, '')",
    "agent": "coalesce(j.agent, r.agent, '')",
    "model": "j.model",
    "key": "coalesce(j.charged_to, '')",
    "day": "to_char(date_trunc('day', j.created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD')",
}
Dimension = Literal["tenant", "agent", "model", "key", "day"]


AlertKind = Literal["warning", "exceeded"]
# The share of a budget at which each alert is due.
ALERT_AT: tuple[tuple[AlertKind, float], ...] = (
    ("warning", budgets.WARNING_FRACTION),
    ("exceeded", 1.0),
)


@dataclass(frozen=True)
class Alert:
    """A budget alert due: its kind, the budget, the spend that made it due."""

    kind: AlertKind
    limit: BudgetLimit
    spend: Spend
    new: bool  # raised by this call (else raised before, its deliveries not yet started)


def _limit(row: Any) -> BudgetLimit:
    values = dict(zip(LIMIT_COLUMNS, row, strict=True))
    if values["usd"] is not None:
        values["usd"] = float(values["usd"])
    return BudgetLimit.model_validate(values)


class BudgetStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ------------------------------------------------------------ what operators set

    async def limits(self, tenant: str) -> list[BudgetLimit]:
        """The tenant's budgets, its own first, then its credentials'."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {', '.join(LIMIT_COLUMNS)} FROM budgets WHERE tenant = %s "
                "ORDER BY subject, period",
                (tenant,),
            )
            return [_limit(row) for row in await cur.fetchall()]

    async def save(self, limit: BudgetLimit) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO budgets (tenant, subject, period, usd, tokens, mode)
                   VALUES (%(tenant)s, %(subject)s, %(period)s, %(usd)s, %(tokens)s, %(mode)s)
                   ON CONFLICT (tenant, subject, period) DO UPDATE SET
                       usd = EXCLUDED.usd, tokens = EXCLUDED.tokens, mode = EXCLUDED.mode,
                       updated_at = now()""",
                limit.model_dump(),
            )

    async def remove(self, tenant: str, subject: str, period: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM budgets WHERE tenant = %s AND subject = %s AND period = %s",
                (tenant, subject, period),
            )

    # ------------------------------------------------------------ what was spent

    async def spend(self, limit: BudgetLimit, now: datetime) -> Spend:
        """What the budget's subject spent in the current period, and its calls in flight."""
        async with self.pool.connection() as conn:
            return await _spend(conn, limit, now)

    async def start_refusal(
        self, tenant: str, charged_to: str | None, now: datetime
    ) -> tuple[str, datetime] | None:
        """Why a start charged to `charged_to` of `tenant` is refused now (an enforcing budget
        of the tenant or of that credential is spent), and when it may go again; None if it
        may start."""
        refusals: list[tuple[str, datetime]] = []
        for limit in await self.limits(tenant):
            if limit.mode != "enforcing" or limit.subject not in ("", charged_to):
                continue
            spend = await self.spend(limit, now)
            if budgets.verdict(limit, spend) == "exhausted":
                _, reset = budgets.period_bounds(limit.period, now)
                refusals.append((budgets.exhausted_reason(limit, spend, reset), reset))
        # The latest reset: before it, one of the budgets still refuses.
        return max(refusals, key=lambda refusal: refusal[1]) if refusals else None

    # ------------------------------------------------------------ model calls

    async def admit(
        self,
        charge: Charge,
        run_id: str,
        step_id: str,
        *,
        prompt_tokens: int,
        hold_seconds: float,
        now: datetime,
    ) -> Admission:
        """The verdict on one model call (a prompt of about `prompt_tokens`) under its
        tenant's and its credential's enforcing budgets. A call that goes (or wraps up) under
        one holds what it is expected to take until `release`, or `hold_seconds`."""
        subjects = ["", charge.charged_to or ""]
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"""SELECT {", ".join(LIMIT_COLUMNS)} FROM budgets
                    WHERE tenant = %s AND subject = ANY(%s)
                    ORDER BY subject, period FOR UPDATE""",
                (charge.tenant, subjects),
            )
            found = [_limit(row) for row in await cur.fetchall()]
            admission = Admission(budgeted=bool(found))
            held = budgets.Ask()
            for limit in found:
                if limit.mode != "enforcing":
                    continue
                spend = await _spend(conn, limit, now, beside=(run_id, step_id))
                ask = budgets.asking(spend, prompt_tokens)
                held = budgets.Ask(tokens=max(held.tokens, ask.tokens), usd=max(held.usd, ask.usd))
                kind = budgets.verdict(limit, spend, ask)
                if budgets.SEVERITY[kind] <= budgets.SEVERITY[admission.verdict]:
                    continue
                _, reset = budgets.period_bounds(limit.period, now)
                admission = Admission(
                    budgeted=True,
                    verdict=kind,
                    budget=limit,
                    reset_at=reset,
                    reason=budgets.exhausted_reason(limit, spend, reset)
                    if kind == "exhausted"
                    else None,
                )
            enforced = any(limit.mode == "enforcing" for limit in found)
            if enforced and admission.verdict in ("go", "wrap_up"):
                admission.held = True
                await conn.execute(
                    """INSERT INTO budget_holds (run_id, step_id, tenant, charged_to, tokens,
                                                 usd, expires_at)
                       VALUES (%s, %s, %s, %s, %s, %s, %s)
                       ON CONFLICT (run_id, step_id) DO UPDATE SET tokens = EXCLUDED.tokens,
                           usd = EXCLUDED.usd, expires_at = EXCLUDED.expires_at""",
                    (
                        run_id,
                        step_id,
                        charge.tenant,
                        charge.charged_to,
                        held.tokens,
                        held.usd,
                        now + timedelta(seconds=hold_seconds),
                    ),
                )
        return admission

    async def release(self, run_id: str, step_id: str) -> None:
        """The call has landed (its response journaled) or failed: its place is free."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM budget_holds WHERE run_id = %s AND step_id = %s", (run_id, step_id)
            )

    async def crossed(self, charge: Charge, now: datetime) -> list[Alert]:
        """The alerts due for the budgets `charge` counts against and not yet handed to
        their deliveries: "warning" at WARNING_FRACTION of a budget and "exceeded" at all of
        it, each raised once a period (`new` the first time it is seen)."""
        due: list[Alert] = []
        for limit in await self.limits(charge.tenant):
            if limit.subject not in ("", charge.charged_to):
                continue
            spend = await self.spend(limit, now)
            share = budgets.used(limit, spend)
            start, _ = budgets.period_bounds(limit.period, now)
            key = (limit.tenant, limit.subject, limit.period, start)
            for kind, at in ALERT_AT:
                if share < at:
                    continue
                async with self.pool.connection() as conn:
                    cur = await conn.execute(
                        """INSERT INTO budget_alerts (tenant, subject, period, period_start,
                                                      kind, spent_usd, spent_tokens)
                           VALUES (%s, %s, %s, %s, %s, %s, %s)
                           ON CONFLICT DO NOTHING RETURNING 1""",
                        (*key, kind, spend.usd, spend.tokens),
                    )
                    new = await cur.fetchone() is not None
                    cur = await conn.execute(
                        """SELECT 1 FROM budget_alerts
                           WHERE (tenant, subject, period, period_start, kind)
                                 = (%s, %s, %s, %s, %s) AND notified_at IS NULL""",
                        (*key, kind),
                    )
                    if await cur.fetchone() is not None:
                        due.append(Alert(kind=kind, limit=limit, spend=spend, new=new))
        return due

    async def notified(self, alert: Alert, now: datetime) -> None:
        """The alert's deliveries are on their way (its workflow started)."""
        start, _ = budgets.period_bounds(alert.limit.period, now)
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE budget_alerts SET notified_at = now()
                   WHERE (tenant, subject, period, period_start, kind) = (%s, %s, %s, %s, %s)""",
                (alert.limit.tenant, alert.limit.subject, alert.limit.period, start, alert.kind),
            )

    async def alerts(self, tenant: str) -> list[dict[str, Any]]:
        """The alerts raised for the tenant's budgets, newest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT tenant, subject, period, period_start, kind,
                          spent_usd::float8 AS spent_usd, spent_tokens, created_at
                   FROM budget_alerts WHERE tenant = %s ORDER BY created_at DESC""",
                (tenant,),
            )
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]

    # ------------------------------------------------------------ what things cost

    async def costs(
        self, by: list[Dimension], since: datetime, tenant: str | None
    ) -> list[dict[str, Any]]:
        """What the journal holds since `since` (of `tenant` alone, if named), summed by
        `by`: calls, tokens in and out, USD."""
        columns = [f"{DIMENSIONS[d]} AS {d}" for d in by]
        group = ", ".join(str(i + 1) for i in range(len(by)))
        where = "j.created_at >= %(since)s"
        if tenant is not None:
            where += f" AND {DIMENSIONS['tenant']} = %(tenant)s"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT {", ".join([*columns, ""])} count(*) AS calls,
                           coalesce(sum(j.tokens_in), 0)::bigint AS tokens_in,
                           coalesce(sum(j.tokens_out), 0)::bigint AS tokens_out,
                           round(coalesce(sum(j.cost_usd), 0), 6)::float8 AS cost_usd
                    FROM model_journal j LEFT JOIN runs r USING (run_id)
                    WHERE {where}
                    {f"GROUP BY {group} ORDER BY {group}" if by else ""}""",
                {"since": since, "tenant": tenant},
            )
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def _spend(
    conn: Any, limit: BudgetLimit, now: datetime, beside: tuple[str, str] = ("", "")
) -> Spend:
    """What the budget's subject spent in its current period, and its calls in flight but
    the one `beside` names (the asking call's own, from an earlier attempt)."""
    start, _ = budgets.period_bounds(limit.period, now)
    params = {"tenant": limit.tenant, "subject": limit.subject, "start": start}
    cur = await conn.execute(SPENT, params)
    tokens, usd, largest_tokens, largest_out = await cur.fetchone()
    cur = await conn.execute(IN_FLIGHT, {**params, "run": beside[0], "step": beside[1]})
    in_flight, held_tokens, held_usd = await cur.fetchone()
    return Spend(
        tokens=tokens,
        usd=usd,
        largest_tokens=largest_tokens,
        largest_out=largest_out,
        in_flight=in_flight,
        held_tokens=held_tokens,
        held_usd=held_usd,
    )
