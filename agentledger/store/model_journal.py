"""The model-response journal: a response that arrived is paid for, so it is kept.

A model activity journals each response before it returns. A retry of the same step (its
worker died after the response came back) reuses the journaled response instead of paying
for the call again. Responses the run never used are what the receipt calls unaccepted.
Each is journaled under whom it is charged to (tenant, credential, agent): the journal is
the ledger budgets and `agentledger costs` read (agentledger.store.budget_store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.results import Usage
from agentledger.core.spec import JsonDict
from agentledger.core.wire import Charge

# The journal's statements, shared with the mirror's claim and report of a model attempt
# (agentledger.store.mirror_store), which run them in their own statements to save round trips.
EARLIEST_ANSWER = """SELECT attempt, response FROM model_journal
                     WHERE run_id = %(run)s AND step_id = %(step)s AND model = %(model)s
                     ORDER BY attempt LIMIT 1"""
RECORD_ANSWER = """INSERT INTO model_journal (run_id, step_id, attempt, model, response,
                                              tokens_in, tokens_out, cost_usd,
                                              tenant, charged_to, agent)
                   VALUES (%(run)s, %(step)s, %(attempt)s, %(model)s, %(response)s,
                           %(answer_tin)s, %(answer_tout)s, %(answer_cost)s,
                           %(answer_tenant)s, %(answer_charged_to)s, %(answer_agent)s)
                   ON CONFLICT DO NOTHING"""


@dataclass(frozen=True)
class Answer:
    """A model's response as the journal keeps it: paid for, so never asked for again."""

    model: str
    response: JsonDict
    usage: Usage
    cost_usd: float
    charge: Charge | None = None  # None: a call of a run from before charges were named

    def params(self) -> JsonDict:
        charge = self.charge
        return {
            "model": self.model,
            "response": Jsonb(self.response),
            "answer_tin": self.usage.input_tokens,
            "answer_tout": self.usage.output_tokens,
            "answer_cost": self.cost_usd,
            "answer_tenant": charge.tenant if charge else None,
            "answer_charged_to": charge.charged_to if charge else None,
            "answer_agent": charge.agent if charge else None,
        }


class ModelJournal:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def find(self, run_id: str, step_id: str, model: str) -> tuple[int, JsonDict] | None:
        """The earliest journaled response for this step and model: (attempt, response)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                EARLIEST_ANSWER, {"run": run_id, "step": step_id, "model": model}
            )
            row = await cur.fetchone()
        return (int(row[0]), dict(row[1])) if row else None

    async def record(
        self,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        model: str,
        response: JsonDict,
        usage: Usage,
        cost_usd: float,
        charge: Charge | None = None,
    ) -> None:
        await self.keep(run_id, step_id, attempt, Answer(model, response, usage, cost_usd, charge))

    async def keep(self, run_id: str, step_id: str, attempt: int, answer: Answer) -> None:
        """Journal one attempt's answer (a second write of it changes nothing)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                RECORD_ANSWER,
                {"run": run_id, "step": step_id, "attempt": attempt, **answer.params()},
            )

    async def mark_reused(self, run_id: str, step_id: str, attempt: int, by: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE model_journal SET reused_by = %s
                   WHERE run_id = %s AND step_id = %s AND attempt = %s""",
                (by, run_id, step_id, attempt),
            )

    async def unaccepted(self, run_id: str, conn: Any | None = None) -> tuple[int, float]:
        """Tokens and cost of responses no accepted step used: (tokens, usd). A model step's
        output, and a verify step's (its judge), name the journal attempt they used. Read on
        `conn` when given (inside its transaction), else on a connection of the pool."""
        if conn is None:
            async with self.pool.connection() as own:
                return await self.unaccepted(run_id, own)
        cur = await conn.execute(
            """SELECT coalesce(sum(j.tokens_in + j.tokens_out), 0),
                      coalesce(sum(j.cost_usd), 0)::float
               FROM model_journal j
               WHERE j.run_id = %s AND NOT EXISTS (
                   SELECT 1 FROM steps s
                   WHERE s.run_id = j.run_id AND s.step_id = j.step_id AND s.final
                     AND (s.output ->> 'journal_attempt')::int = j.attempt)""",
            (run_id,),
        )
        row: Any = await cur.fetchone()
        return int(row[0]), float(row[1])
