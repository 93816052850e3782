"""What the mirror answers for the fleet: `stats`'s figures and what `prune` deleted. Pure
models, so `agentledger.types` hands them out without loading the store that computes them."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ToolFailures(BaseModel):
    tool: str
    calls: int = Field(description="tool-call steps")
    failed_attempts: int = Field(description="attempts that reported a failure (retried or not)")
    failed_calls: int = Field(description="calls whose accepted result was a failure")


class ModelFailures(BaseModel):
    model: str = Field(description="the model name the step records (the provider's model)")
    calls: int
    failed_attempts: int
    failed_calls: int


class Stats(BaseModel):
    """Every figure is over the runs started since `since` (all runs when None)."""

    since: datetime | None
    # Cost first: what the work costs is the figure people ask for.
    cost_per_completed_run_usd: float | None = Field(
        description="what finished runs cost (failed and cancelled ones too) / completed runs"
    )
    completed_run_cost_avg_usd: float | None = Field(description="mean cost of a completed run")
    finished_cost_usd: float = Field(description="spent on finished runs")
    cost_total_usd: float = Field(description="spent on every run, live ones so far included")
    runs_started: int
    runs_finished: int = Field(description="completed, failed or cancelled")
    runs_completed: int
    runs_failed: int
    runs_cancelled: int
    runs_live: int = Field(description="not finished yet: running, waiting, paused")
    completion_rate: float | None = Field(description="completed / finished")
    failure_rate: float | None = Field(description="user-visible: failed / finished")
    duration_median_seconds: float | None = Field(description="finished runs, start to end")
    duration_p95_seconds: float | None
    retries: int = Field(description="attempts after a step's first")
    retries_per_run: float | None = Field(description="retries / runs started")
    runs_retried: int
    lost_attempts: int = Field(description="attempts whose worker died before reporting")
    runs_recovered: int = Field(description="runs that went on after losing an attempt")
    duplicates_prevented: int = Field(description="side effects the ledger refused to repeat")
    approvals_decided: int = Field(description="approved or rejected")
    approvals_expired: int
    approval_wait_median_seconds: float | None = Field(description="request to decision")
    approval_wait_p95_seconds: float | None
    tool_failures: list[ToolFailures]
    model_failures: list[ModelFailures]
    unpriced_model_calls: int = Field(0, description="calls of models with no known price")
    unpriced_models: list[str] = Field(
        default_factory=list, description="their models: the cost figures leave them out"
    )


class PruneResult(BaseModel):
    cutoff: datetime
    dry_run: bool
    tenant: str | None = None  # whose runs alone; None: every tenant's
    runs: int
    deleted: dict[str, int]
    artifacts_kept_for_newer_runs: int
