"""What `agentledger deploy check` found: per run, whether its history replays against the code
about to be deployed, and where it first did not."""

from __future__ import annotations

from pydantic import BaseModel


class ReplayVerdict(BaseModel):
    """One run's replay against this checkout's code."""

    workflow_id: str
    run_id: str
    workflow_type: str
    open: bool
    ok: bool
    event_id: int | None = None  # the history event the code disagreed with, where known
    error: str | None = None  # the first nondeterminism, as the SDK tells it
    # Retired version branches the run needs (agentledger.core.version_branches): it is
    # refused by name rather than replayed.
    needs_retired: list[str] = []


class DeployCheck(BaseModel):
    verdicts: list[ReplayVerdict]

    @property
    def passed(self) -> bool:
        return all(v.ok for v in self.verdicts)

    @property
    def failed(self) -> list[ReplayVerdict]:
        return [v for v in self.verdicts if not v.ok]
