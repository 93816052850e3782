"""An eval's scores: agentledger's evaluators beside pydantic-evals'.

Each case's task output is the candidate's answer, so pydantic-evals' own evaluators
(`EqualsExpected`, `Contains`, `LLMJudge`, ...) score it as they would any; what the run did
(its tool calls, approvals, verification, tokens and cost) is in the case's attributes,
and agentledger's evaluators compare it with the recording, the case's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_evals.evaluators import Evaluator, EvaluatorContext

from agentledger.core.eval_cases import EvalInputs, Recording, canonical

CANDIDATE = "candidate"  # the attribute holding the candidate's run, as a Recording


def _runs(ctx: EvaluatorContext[EvalInputs, Any, Any]) -> tuple[Recording, Recording] | None:
    raw = ctx.attributes.get(CANDIDATE)
    if raw is None or ctx.metadata is None:
        return None
    baseline = (
        ctx.metadata
        if isinstance(ctx.metadata, Recording)
        else Recording.model_validate(ctx.metadata)
    )
    return baseline, Recording.model_validate(raw)


def tool_trace(run: Recording) -> list[str]:
    return [f"{c.tool} {canonical(c.arguments)}" for c in run.calls]


def approval_trace(run: Recording) -> list[str]:
    return [f"{a.tool} {canonical(a.arguments)} {a.decision}" for a in run.approvals]


@dataclass(repr=False)
class SameToolCalls(Evaluator[EvalInputs, Any, Any]):
    """The candidate made the recorded tool calls, in the recorded order."""

    def evaluate(self, ctx: EvaluatorContext[EvalInputs, Any, Any]) -> bool | dict[str, bool]:
        runs = _runs(ctx)
        return {} if runs is None else tool_trace(runs[0]) == tool_trace(runs[1])


@dataclass(repr=False)
class SameApprovals(Evaluator[EvalInputs, Any, Any]):
    """The candidate asked the approvals the recording asked, decided as they were."""

    def evaluate(self, ctx: EvaluatorContext[EvalInputs, Any, Any]) -> bool | dict[str, bool]:
        runs = _runs(ctx)
        return {} if runs is None else approval_trace(runs[0]) == approval_trace(runs[1])


@dataclass(repr=False)
class VerificationPassed(Evaluator[EvalInputs, Any, Any]):
    """The candidate's answer passed its checks, wherever the recorded one did."""

    def evaluate(self, ctx: EvaluatorContext[EvalInputs, Any, Any]) -> bool | dict[str, bool]:
        runs = _runs(ctx)
        if runs is None or runs[0].verification_passed is not True:
            return {}
        return runs[1].verification_passed is True


AGENTLEDGER_EVALUATORS: tuple[Evaluator[EvalInputs, Any, Any], ...] = (
    SameToolCalls(),
    SameApprovals(),
    VerificationPassed(),
)
