"""What a chaos scenario found, and the audit that fills it in once its runs have ended."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentledger.client import projection
from chaos.audit import audit
from chaos.lab import Lab


@dataclass
class Outcome:
    scenario: str
    runs: int
    completed: int = 0
    seconds: float = 0.0
    disruptions: int = 0
    duplicate: int = 0
    divergent: int = 0
    lost: int = 0
    orphan: int = 0
    duplicate_effects: int = 0
    missing_effects: int = 0
    paid_twice: int = 0
    missing_receipts: int = 0
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems


async def finish(
    lab: Lab,
    outcome: Outcome,
    run_ids: list[str],
    started: float,
    effects: Mapping[str, Mapping[str, int]] | None = None,
    within: float = 300,
) -> Outcome:
    """Wait for the runs to end, then audit every one of them into `outcome` (each run's
    effects as `effects` names them; by default, one ticket and one message; `within`: the
    seconds they have to end)."""
    still_open = await lab.wait_ended(run_ids, within)
    outcome.problems += [f"{run_id} did not end" for run_id in still_open]
    outcome.seconds = round(time.monotonic() - started, 1)
    result = await audit(lab.client, lab.pool, run_ids, effects)
    outcome.completed = result.completed
    for kind in projection.KINDS:
        setattr(outcome, kind, result.differences[kind])
    outcome.duplicate_effects = result.duplicate_effects
    outcome.missing_effects = result.missing_effects
    outcome.paid_twice = result.paid_twice
    outcome.missing_receipts = result.missing_receipts
    if result.overlapping_calls:
        outcome.figures["model calls paid by two overlapping attempts"] = result.overlapping_calls
    outcome.problems += result.problems
    return outcome


async def late_writes(lab: Lab, run_ids: list[str]) -> int:
    """Attempts that reported after another attempt's result was accepted (and changed
    nothing: the audit checks every row against history)."""
    async with lab.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT count(*) FROM step_attempts a JOIN steps s USING (run_id, step_id)
               WHERE a.run_id = ANY(%s) AND a.attempt < s.attempt AND s.final
                 AND a.finished_at > s.finished_at""",
            (run_ids,),
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0
