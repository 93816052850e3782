"""Pure decisions the run workflow takes on failures: which retry policy, what is over
budget. No I/O and no clock, so they are safe in workflow code. (Which kind of error a
failure was is decided in agentledger.core.errors.)"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from agentledger.core.spec import Budget, JsonDict, RiskLevel, RunSpec
from agentledger.core.wire import ProposedToolCall

REPAIR_PROMPT = (
    "Your previous reply could not be used: {problem}. Reply again. A tool call's arguments "
    "must be one JSON object that matches the tool's parameters schema exactly; otherwise "
    "give your final answer as Markdown starting with '## Summary'."
)


def retry_policy(spec: RunSpec, max_attempts: int) -> RetryPolicy:
    failures = spec.failures
    return RetryPolicy(
        initial_interval=timedelta(seconds=spec.timeouts.initial_retry_seconds),
        backoff_coefficient=failures.backoff_coefficient,
        maximum_interval=timedelta(seconds=failures.max_retry_seconds),
        maximum_attempts=max_attempts,
    )


def tool_limits(spec: RunSpec, tool: str) -> tuple[int, float]:
    """(max attempts, timeout seconds) for a tool, after its per-tool overrides."""
    override = spec.failures.tools.get(tool)
    attempts = override.max_attempts if override and override.max_attempts else None
    timeout = override.timeout_seconds if override and override.timeout_seconds else None
    return attempts or spec.timeouts.max_attempts, timeout or spec.timeouts.tool_seconds


def runs_locally(spec: RunSpec, call: ProposedToolCall) -> bool:
    """Whether a tool call runs as a local activity: only when the run's input says so (the
    engine records its choice there when the run starts: None is a run started before it
    did, whose tools stay activities of their own), and only a read-only (no side effect),
    low-risk tool, which the ledger has nothing to do for and a re-run after a crash cannot
    harm; and not a tool that says it may take seconds (`Tool.local`)."""
    return (
        spec.local_read_only_tools is True
        and not call.side_effect
        and call.risk == RiskLevel.LOW
        and call.local
    )


def over_budget(budget: Budget, tokens: int, cost_usd: float) -> str | None:
    if budget.max_tokens and tokens > budget.max_tokens:
        return f"token budget exceeded: {tokens} > {budget.max_tokens}"
    if budget.max_cost_usd and cost_usd > budget.max_cost_usd:
        return f"cost budget exceeded: ${cost_usd:.6f} > ${budget.max_cost_usd}"
    return None


def extend_budget(
    budget: Budget,
    original: Budget,
    edit: JsonDict | None,
    spent: tuple[int, float],
) -> Budget:
    """An approver's new limits, or, without an edit, one more allowance of the original:
    beyond what was `spent` (tokens, cost) when it is given, so that one approval lets the
    run go on however far one step overshot (a reply of 250,000 tokens against an
    allowance of 60 asked again 4,000 times)."""
    if edit:
        return budget.model_copy(update=Budget.model_validate(edit).model_dump(exclude_unset=True))
    tokens, cost = spent
    return Budget(
        max_tokens=max(budget.max_tokens or 0, tokens) + original.max_tokens
        if original.max_tokens
        else None,
        max_cost_usd=max(budget.max_cost_usd or 0, cost) + original.max_cost_usd
        if original.max_cost_usd
        else None,
    )
