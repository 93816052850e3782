"""`client.evals`: recorded runs as eval cases, and a candidate agent scored against them,
before it is deployed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from agentledger.client.scope import Scope
from agentledger.core.eval_reports import EvalGate, EvalReport
from agentledger.profiles import Agent


class Evals:
    """Datasets of the caller's finished runs, and evals of a candidate over them."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def dataset(
        self,
        path: str | Path,
        *,
        run_ids: list[str] | None = None,
        agent: str | None = None,
        outcome: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """Write a pydantic-evals dataset of finished runs (by id, else those matching) to
        `path` (YAML or JSON): each case a run's task and its recording. Returns the cases."""
        from agentledger.client import eval_runs  # pydantic-evals, only when asked

        dataset = await eval_runs.build_dataset(
            await self.scope.database(),
            run_ids=run_ids,
            agent=agent,
            outcome=outcome,
            since=since,
            until=until,
            tenant=self.scope.tenant,
        )
        eval_runs.save_dataset(dataset, path)
        return len(dataset.cases)

    async def run(
        self,
        dataset: str | Path,
        *,
        candidate: Agent,
        agents: Mapping[str, Agent] | None = None,
        live_read_only: bool = False,
        concurrency: int = 4,
        gate: EvalGate | None = None,
        on_progress: Callable[[str], Any] | None = None,
    ) -> EvalReport:
        """Replay `dataset`'s cases to `candidate`, each as a durable run answered from its
        recording, and score it against the recording. The candidate's
        sub-agents come from `agents`, the profiles it was loaded with (by name), as a run of
        it would have them. The same dataset and candidate resume the same eval;
        `on_progress` gets its progress (cases done / total)."""
        from agentledger.client import eval_runs
        from agentledger.client.eval_judges import JudgeModels

        found, text = eval_runs.load_dataset(dataset)
        return await eval_runs.run_eval(
            self.scope,
            found,
            dataset_text=text,
            dataset_name=Path(dataset).name,
            candidate=candidate.spec_fields(dict(agents) if agents is not None else None),
            candidate_name=candidate.name,
            live_read_only=live_read_only,
            concurrency=concurrency,
            gate=gate,
            on_progress=on_progress,
            judges=JudgeModels(self.scope.config).through_providers,
        )
