"""`eval dataset` and `eval run`: recorded runs as a pydantic-evals dataset, replayed.

An eval (a dataset and a candidate) is one durable workflow (agentledger.workflows.evals)
whose children are its cases' runs of the candidate's profile, each under its tenant's
policy: a re-run of the same eval finds that workflow instead of starting it again, so it
resumes where it was and pays for no model call twice. The runs' tool calls are answered
from the recording by the tool activity (agentledger.store.eval_store), and a case that
diverges is ended where it stopped by the eval workflow; approvals they ask are decided
here while the command waits, as the recording decided them. The report is scored from the
mirror.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic_evals import Case, Dataset
from pydantic_evals.dataset import set_eval_attribute
from pydantic_evals.evaluators import EqualsExpected
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from agentledger.client.approvals import Approvals
from agentledger.client.eval_scores import (
    AGENTLEDGER_EVALUATORS,
    CANDIDATE,
    SameApprovals,
    SameToolCalls,
    VerificationPassed,
)
from agentledger.client.runs import Runs
from agentledger.client.scope import Scope
from agentledger.core.errors import InvalidRequest, NotAnswered, OperationRefused, RunNotFound
from agentledger.core.eval_cases import (
    EvalCaseTask,
    EvalInputs,
    EvalWorkflowInput,
    Recording,
    canonical,
    case_key,
    eval_id,
    eval_workflow_id,
)
from agentledger.core.eval_reports import CaseScore, EvalGate, EvalReport, totals
from agentledger.core.spec import FailurePolicy, RunSpec
from agentledger.store import eval_store
from agentledger.workflows.child_runs import child_run_id
from agentledger.workflows.evals import EvalWorkflow

EvalDataset = Dataset[EvalInputs, str, Recording]
CUSTOM_EVALUATORS = (SameToolCalls, SameApprovals, VerificationPassed)
# How often the eval's running cases are looked at, how long a look at its progress may
# take, and how long a finished case's receipt may take to reach the mirror.
POLL_SECONDS = 0.25
QUERY_SECONDS = 5.0
RECEIPT_SECONDS = 60.0


async def build_dataset(
    pool: AsyncConnectionPool,
    *,
    run_ids: list[str] | None = None,
    agent: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    tenant: str | None = None,
    limit: int = 1000,
) -> EvalDataset:
    """A case per finished run chosen (by id, or by agent, outcome and time), named after it."""
    if run_ids is None:
        run_ids = await eval_store.finished_run_ids(
            pool,
            agent=agent,
            outcome=outcome,
            since=since,
            until=until,
            tenant=tenant,
            limit=limit,
        )
    found = await eval_store.recordings(pool, run_ids, tenant=tenant)
    missing = [r for r in run_ids if r not in found]
    if missing:
        raise InvalidRequest(
            f"no finished run {', '.join(missing[:5])} (with a receipt) to record: check the "
            "ids with `agentledger list`, or wait for the runs to end"
        )
    cases = [
        Case(name=run_id, inputs=EvalInputs(task=task), metadata=recording)
        for run_id in run_ids
        for task, recording in [found[run_id]]
    ]
    return EvalDataset(name="agentledger recorded runs", cases=cases)


def save_dataset(dataset: EvalDataset, path: str | Path) -> None:
    """Write the dataset, making its folder (`-o evals/desk.yaml` in a fresh project); a
    path that cannot be written is bad input, named."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        dataset.to_file(target, schema_path=None, custom_evaluator_types=CUSTOM_EVALUATORS)
    except OSError as err:
        raise InvalidRequest(f"cannot write {path}: {err.strerror}") from err


def load_dataset(path: str | Path) -> tuple[EvalDataset, str]:
    """The dataset, and its text (what names the eval with the candidate)."""
    try:
        text = Path(path).read_text()
        dataset = EvalDataset.from_file(Path(path), custom_evaluator_types=CUSTOM_EVALUATORS)
    except OSError as err:
        raise InvalidRequest(f"cannot read {path}: {err.strerror}") from err
    except Exception as err:  # pydantic-evals' own parse and validation errors
        raise InvalidRequest(f"{path} is not an eval dataset: {err}") from err
    return dataset, text


class CaseRunner:
    """Runs one eval's cases on Temporal, as children of its eval workflow, and reads what
    each did."""

    def __init__(
        self,
        scope: Scope,
        client: Client,
        pool: AsyncConnectionPool,
        *,
        eval_id: str,
        candidate: dict[str, Any],
        live_read_only: bool,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.scope = scope
        self.client, self.pool = client, pool
        self.eval_id = eval_id
        self.candidate = candidate
        self.task_queue = scope.config.task_queue
        self.live_read_only = live_read_only
        self.on_progress = on_progress
        self.workflow_id = eval_workflow_id(self.spec("-").tenant, eval_id)
        self.recordings: dict[str, Recording] = {}

    def spec(self, task: str) -> RunSpec:
        """The candidate's run of a case; a divergence pauses it (to be ended), whatever the
        candidate's policy for refused permissions says."""
        failures = FailurePolicy.model_validate(self.candidate.get("failures") or {})
        fields = {
            **self.candidate,
            "task": task,
            "failures": failures.model_copy(update={"on_permission_denied": "pause"}),
        }
        return self.scope.spec_for(RunSpec.model_validate(fields))

    def run_id(self, name: str) -> str:
        """A case's run: the eval workflow's child, keyed by the eval and the case."""
        return child_run_id(self.workflow_id, case_key(self.eval_id, name))

    async def run_all(self, cases: dict[str, Case[EvalInputs, str, Recording]], n: int) -> None:
        """Every case's run, to its end: the eval workflow started (or found, when this eval
        ran before) and followed while it works."""
        await eval_store.register(
            self.pool,
            eval_id=self.eval_id,
            cases=[(self.run_id(name), name, c.metadata) for name, c in cases.items()],  # type: ignore[misc]
            live_read_only=self.live_read_only,
        )
        tasks = [EvalCaseTask(name=name, task=c.inputs.task) for name, c in cases.items()]
        started = EvalWorkflowInput(
            eval_id=self.eval_id,
            candidate=self.spec(tasks[0].task),
            cases=tasks,
            concurrency=n,
            total=len(tasks),
        )
        try:
            await self.client.start_workflow(
                EvalWorkflow.run,
                started,
                id=self.workflow_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=f"eval {self.eval_id}: {len(tasks)} case(s)",
            )
        except WorkflowAlreadyStartedError:
            pass  # this eval ran before, or runs now: follow it
        await self._follow(cases)

    async def _follow(self, cases: dict[str, Case[EvalInputs, str, Recording]]) -> None:
        """Until the eval workflow ends: its progress shown, and each running case's approvals
        decided as recorded. While no worker answers (one died mid-eval), it waits: the eval
        is durable, and goes on when a worker takes it again."""
        handle = self.client.get_workflow_handle_for(EvalWorkflow.run, self.workflow_id)
        shown = -1
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            try:
                progress = await asyncio.wait_for(
                    handle.query(EvalWorkflow.progress), timeout=QUERY_SECONDS
                )
            except (TimeoutError, RPCError):
                await asyncio.sleep(POLL_SECONDS)
                continue  # no worker answers yet
            if self.on_progress is not None and progress.done != shown:
                shown = progress.done
                self.on_progress(f"{progress.done}/{progress.total} case(s) done")
            for name in progress.running:
                await self._look(self.run_id(name), cases[name].metadata)  # type: ignore[arg-type]
            await asyncio.sleep(POLL_SECONDS)
        try:
            await handle.result()
        except WorkflowFailureError as err:
            cause = getattr(err.cause, "message", None) or str(err.cause)
            raise OperationRefused(f"eval {self.eval_id} ended without its cases: {cause}") from err

    async def _look(self, run_id: str, recording: Recording) -> None:
        """One look at a running case: an approval it asks is decided as recorded."""
        try:
            state = await Runs(self.scope).status(run_id)
        except (NotAnswered, RunNotFound):
            return  # no worker yet, or not started yet: the next look
        pending = state.pending_approval
        if pending is not None and pending.kind == "action":
            await self._decide(run_id, pending.tool, pending.arguments, pending, recording)

    async def scored(self, name: str) -> str:
        """The case's answer ("" if none); what its run did goes into the case's attributes."""
        async with asyncio.timeout(RECEIPT_SECONDS):
            done = await self._recorded(self.run_id(name))
        self.recordings[name] = done
        set_eval_attribute(CANDIDATE, done.model_dump(mode="json"))
        return done.answer or ""

    async def _decide(
        self, run_id: str, tool: str, arguments: dict[str, Any], pending: Any, recording: Recording
    ) -> None:
        wanted = f"{tool} {canonical(arguments)}"
        decided = next(
            (a for a in recording.approvals if f"{a.tool} {canonical(a.arguments)}" == wanted),
            None,
        )
        try:
            if decided is not None and decided.decision == "approved":
                await Approvals(self.scope).approve(
                    run_id, by="eval", role=pending.required_role, action_hash=pending.action_hash
                )
            else:
                reason = (
                    decided.reason or "rejected in the recording"
                    if decided is not None
                    else "the recording asked no such approval"
                )
                await Approvals(self.scope).reject(
                    run_id,
                    by="eval",
                    role=pending.required_role,
                    reason=reason,
                    action_hash=pending.action_hash,
                )
        except OperationRefused:
            pass  # decided already (an earlier look): the next look sees it applied

    async def _recorded(self, run_id: str) -> Recording:
        """The candidate's run as a recording, once its receipt is written."""
        while True:
            found = await eval_store.recordings(self.pool, [run_id], tenant=self.scope.tenant)
            if run_id in found:
                return found[run_id][1]
            await asyncio.sleep(POLL_SECONDS)


async def run_eval(
    scope: Scope,
    dataset: EvalDataset,
    *,
    dataset_text: str,
    dataset_name: str,
    candidate: dict[str, Any],
    candidate_name: str,
    live_read_only: bool = False,
    concurrency: int = 4,
    gate: EvalGate | None = None,
    on_progress: Callable[[str], None] | None = None,
    judges: Callable[[list[Any]], list[Any]] | None = None,
) -> EvalReport:
    """Every case replayed to the candidate, scored against its recording; `judges` gives the
    dataset's evaluators their LLM judges' models (through the providers:
    agentledger.client.eval_judges)."""
    if not dataset.cases:
        raise InvalidRequest(
            f"{dataset_name} has no cases: `agentledger eval dataset --agent AGENT -o "
            f"{dataset_name}` makes them from the agent's recorded runs"
        )
    ident = eval_id(dataset_text, f"{candidate.get('profile_hash')}:{live_read_only}")
    pool = await scope.database()
    runner = CaseRunner(
        scope,
        await scope.temporal(),
        pool,
        eval_id=ident,
        candidate=candidate,
        live_read_only=live_read_only,
        on_progress=on_progress,
    )
    by_name = {str(case.name): case for case in dataset.cases}
    await runner.run_all(by_name, concurrency)

    async def task(inputs: EvalInputs) -> str:
        return await runner.scored(next(n for n, c in by_name.items() if c.inputs is inputs))

    evaluators = list(dataset.evaluators)
    if judges is not None:
        evaluators = judges(evaluators)
        for each in dataset.cases:
            each.evaluators = judges(each.evaluators)
    scored = Dataset(
        name=dataset_name,
        cases=dataset.cases,
        evaluators=[EqualsExpected(), *AGENTLEDGER_EVALUATORS, *evaluators],
    )
    result = await scored.evaluate(task, max_concurrency=concurrency, progress=False)
    cases: list[CaseScore] = []
    for case in result.cases:
        run_id = runner.run_id(case.name)
        cases.append(
            CaseScore(
                name=case.name,
                task=case.inputs.task,
                run_id=run_id,
                baseline=by_name[case.name].metadata,  # type: ignore[arg-type]
                candidate=runner.recordings.get(case.name),
                assertions={k: bool(v.value) for k, v in case.assertions.items()},
                divergence=await eval_store.divergence(pool, run_id),
            )
        )
    for failure in result.failures:
        cases.append(
            CaseScore(
                name=failure.name,
                task=failure.inputs.task,
                run_id=runner.run_id(failure.name),
                baseline=by_name[failure.name].metadata,  # type: ignore[arg-type]
                candidate=None,
                error=failure.error_message,
            )
        )
    order = list(by_name)
    cases.sort(key=lambda c: order.index(c.name))
    summary = totals(cases)
    return EvalReport(
        eval_id=ident,
        dataset=dataset_name,
        candidate=candidate_name,
        cases=cases,
        totals=summary,
        gate_failures=(gate or EvalGate()).failures(summary),
    )
