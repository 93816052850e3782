"""What approving an over-budget run without an edit gives it
(agentledger/workflows/policies.py)."""

from __future__ import annotations

from agentledger.core.spec import Budget
from agentledger.workflows.policies import extend_budget, over_budget


def test_one_approval_lets_a_run_go_on_however_far_one_step_overshot():
    original = Budget(max_tokens=60)
    spent = (250_120, 0.15)
    extended = extend_budget(original, original, None, spent=spent)
    assert extended.max_tokens == 250_180  # what was spent, and one more allowance
    assert over_budget(extended, spent[0], spent[1]) is None


def test_an_edit_sets_the_limits_it_names():
    original = Budget(max_tokens=60)
    edited = extend_budget(original, original, {"max_tokens": 10_000}, spent=(5_000, 0.0))
    assert edited.max_tokens == 10_000
