"""A proposed call carries its tool's argument schema only when it waits for an approver
(the schema is for checking an approver's edit; in every other call it was
history bytes nothing read)."""

from __future__ import annotations

from pydantic import BaseModel

from agentledger.activities.proposals import proposed_call
from agentledger.core.spec import ApprovalPolicy, RiskLevel
from agentledger.core.wire import ModelCallInput
from agentledger.tools import Tool, ToolContext, ToolRegistry


class Args(BaseModel):
    n: int = 0


async def run(args: Args, ctx: ToolContext) -> dict[str, int]:
    return {"n": args.n}


REGISTRY = ToolRegistry(
    [
        Tool("read", "Reads.", Args, run),  # type: ignore[arg-type]
        Tool("pay", "Pays.", Args, run, risk=RiskLevel.HIGH),  # type: ignore[arg-type]
    ]
)


def model_input(**approval: object) -> ModelCallInput:
    return ModelCallInput(
        run_id="r", step_id="s", seq=1, model=None, allowed_tools=None, **approval
    )


def test_only_a_call_that_waits_for_an_approver_carries_its_schema() -> None:
    policy = ApprovalPolicy(require_at_or_above=RiskLevel.HIGH, always=[])
    given = model_input(approval_at=policy.require_at_or_above, approval_always=policy.always)
    read = proposed_call(REGISTRY, "c1", "read", '{"n": 1}', None, given.needs_schema)
    pay = proposed_call(REGISTRY, "c2", "pay", '{"n": 2}', None, given.needs_schema)
    assert read.arguments == {"n": 1} and read.parameters is None
    assert pay.parameters == REGISTRY.get("pay").parameters
    # The workflow's own rule and the activity's agree for every tool and threshold.
    for at in RiskLevel:
        for always in ([], ["read"]):
            rule = ApprovalPolicy(require_at_or_above=at, always=always)
            given = model_input(approval_at=at, approval_always=always)
            for tool in ("read", "pay"):
                risk = REGISTRY.get(tool).risk
                assert given.needs_schema(tool, risk) == rule.needs_approval(tool, risk)


def test_an_input_scheduled_before_gets_every_schema() -> None:
    """A model call scheduled by a run from before (no approval_at) proposes as it did."""
    given = model_input()
    read = proposed_call(REGISTRY, "c1", "read", "{}", None, given.needs_schema)
    assert read.parameters == REGISTRY.get("read").parameters
