"""`client.costs`: what the model calls cost, summed from the journal of what was paid
(agentledger.store.budget_store) by tenant, agent, model, credential or day. Under a
tenant, its own calls alone; an operator's, every tenant's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import get_args

from agentledger.client.scope import Scope
from agentledger.core.errors import InvalidRequest
from agentledger.core.listings import CostRow
from agentledger.store.budget_store import BudgetStore, Dimension

DIMENSIONS: tuple[str, ...] = get_args(Dimension)


class Costs:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def summary(
        self, by: list[str] | None = None, *, since: datetime | timedelta = timedelta(days=7)
    ) -> list[CostRow]:
        """What was paid since `since` (a time, or an age: the last 7 days by default),
        summed by each of `by` (tenant, agent, model, key, day; none: one total row)."""
        by = by or []
        unknown = [d for d in by if d not in DIMENSIONS]
        if unknown or len(set(by)) != len(by):
            raise InvalidRequest(
                f"costs are summed by {', '.join(DIMENSIONS)} (each once), not "
                f"{', '.join(unknown) or ', '.join(by)}"
            )
        start = datetime.now(UTC) - since if isinstance(since, timedelta) else since
        rows = await BudgetStore(await self.scope.database()).costs(
            by,  # type: ignore[arg-type]
            start,
            self.scope.tenant,
        )
        return [CostRow.model_validate(row) for row in rows]
