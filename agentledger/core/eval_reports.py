"""An eval's report and its gate (pure): per case the baseline beside the candidate, the
totals with cost, and the thresholds that turn them into an exit code."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from agentledger.core.eval_cases import Divergence, Recording

# `eval run`'s exit code when a threshold is not met.
GATE_FAILED = 6


class CaseScore(BaseModel):
    name: str
    task: str
    run_id: str | None
    baseline: Recording
    candidate: Recording | None
    assertions: dict[str, bool] = Field(default_factory=dict)
    divergence: Divergence | None = None
    error: str | None = Field(None, description="why the case could not be run")

    @property
    def passed(self) -> bool:
        return self.error is None and self.divergence is None and all(self.assertions.values())


class EvalTotals(BaseModel):
    cases: int
    passed: int
    pass_rate: float
    diverged: int
    baseline_tokens: int
    candidate_tokens: int
    baseline_cost_usd: float
    candidate_cost_usd: float
    cost_ratio: float
    token_ratio: float


class EvalGate(BaseModel):
    """Thresholds a report must meet; None: not checked."""

    min_pass_rate: float | None = Field(None, ge=0, le=1)
    max_cost_ratio: float | None = Field(None, gt=0)
    max_token_ratio: float | None = Field(None, gt=0)
    max_diverged: int | None = Field(None, ge=0)

    def failures(self, totals: EvalTotals) -> list[str]:
        found = []
        if self.min_pass_rate is not None and totals.pass_rate < self.min_pass_rate:
            found.append(f"pass rate {totals.pass_rate:.0%} < {self.min_pass_rate:.0%}")
        if self.max_cost_ratio is not None and totals.cost_ratio > self.max_cost_ratio:
            found.append(f"cost ratio {totals.cost_ratio:.2f} > {self.max_cost_ratio:.2f}")
        if self.max_token_ratio is not None and totals.token_ratio > self.max_token_ratio:
            found.append(f"token ratio {totals.token_ratio:.2f} > {self.max_token_ratio:.2f}")
        if self.max_diverged is not None and totals.diverged > self.max_diverged:
            found.append(f"{totals.diverged} case(s) diverged > {self.max_diverged}")
        return found


class EvalReport(BaseModel):
    eval_id: str
    dataset: str
    candidate: str
    cases: list[CaseScore]
    totals: EvalTotals
    gate_failures: list[str] = Field(default_factory=list)

    @property
    def passed_gate(self) -> bool:
        return not self.gate_failures

    def json_view(self) -> dict[str, Any]:
        return self.model_dump(mode="json") | {
            "passed_gate": self.passed_gate,
            "cases": [c.model_dump(mode="json") | {"passed": c.passed} for c in self.cases],
        }


def ratio(candidate: float, baseline: float) -> float:
    """Candidate over baseline; both nothing is 1 (no change), something over nothing is inf."""
    if baseline == 0:
        return 1.0 if candidate == 0 else math.inf
    return candidate / baseline


def totals(cases: list[CaseScore]) -> EvalTotals:
    ran = [c.candidate for c in cases if c.candidate is not None]
    passed = sum(c.passed for c in cases)
    base_tokens = sum(c.baseline.tokens for c in cases)
    base_cost = sum(c.baseline.cost_usd for c in cases)
    tokens = sum(r.tokens for r in ran)
    cost = sum(r.cost_usd for r in ran)
    return EvalTotals(
        cases=len(cases),
        passed=passed,
        pass_rate=passed / len(cases) if cases else 1.0,
        diverged=sum(c.divergence is not None for c in cases),
        baseline_tokens=base_tokens,
        candidate_tokens=tokens,
        baseline_cost_usd=round(base_cost, 6),
        candidate_cost_usd=round(cost, 6),
        cost_ratio=ratio(cost, base_cost),
        token_ratio=ratio(tokens, base_tokens),
    )
