"""The policy model, pure: every start resolves a run's policy by one function
(`agentledger.core.tenant_policy.resolve`), which holds a spec to its agent's profile and
puts the tenant's rules first, so a spec can tighten the operator's policy and never loosen
it; edits are JSON Merge Patches (RFC 7396); rules' conditions fail closed. No stack: these
are the functions the door and the workflows call."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.core import merge_patch
from agentledger.core.admission_models import TenantLimits
from agentledger.core.constants import FREE_FORM_AGENT
from agentledger.core.errors import PolicyDenied
from agentledger.core.identity import OPERATOR, Identity
from agentledger.core.policy_rules import ApprovalRule, TenantPolicy, parse_rule
from agentledger.core.spec import ApprovalPolicy, RiskLevel, RunSpec
from agentledger.core.tenant_policy import RunPolicy, resolve
from agentledger.profiles import Agent
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
DESK = Agent(
    name="desk",
    instructions="You help.",
    tools=["search_notes", "create_ticket"],
    approval=ApprovalPolicy(always=["create_ticket"], roles={"create_ticket": "support"}),
)
PROFILES = {"desk": DESK.spec_fields({"desk": DESK})}
RUNNER = frozenset({"runner"})
MARIA = Identity.of_key("81e4274be4edcd55", "maria (refunds)")


def policy(**rules: Any) -> RunPolicy:
    return RunPolicy(limits=TenantLimits(tenant="acme"), tenant_policy=TenantPolicy(**rules))


def asked(**fields: Any) -> RunSpec:
    return RunSpec.model_validate({"task": "t", "tenant": "acme", **fields})


# ---------------------------------------------------------------- free-form specs and agents


def test_a_runner_without_an_agent_runs_the_tenants_default_agent():
    """A start naming no agent, from a caller the tenant does not let write specs, runs the
    only profile loaded: its approvals hold (a free-form start skipped them)."""
    run = resolve(asked(), policy(), requester=MARIA, roles=RUNNER, profiles=PROFILES)
    assert run.agent == "desk"
    assert run.allowed_tools == ["search_notes", "create_ticket"]
    assert run.approval.needs_approval("create_ticket", RiskLevel.LOW, {})
    assert run.approval.role_for("create_ticket", {}) == "support"
    assert run.requester == MARIA and run.tenant_policy == TenantPolicy()


def test_a_task_alone_runs_the_default_agent_the_operator_named_whoever_sends_it():
    """An admin's task alone runs the tenant's default agent when the operator named one; a
    spec of the admin's own, or a task where the only profile loaded is a default nobody
    chose, runs free-form and is recorded as such."""
    admin = frozenset({"admin"})
    named = resolve(asked(user="ana"), policy(default_agent="desk"), roles=admin, profiles=PROFILES)
    assert (named.agent, named.profile_hash) == ("desk", PROFILES["desk"]["profile_hash"])
    unnamed = resolve(asked(), policy(), roles=admin, profiles=PROFILES)
    assert (unnamed.agent, unnamed.allowed_tools) == (FREE_FORM_AGENT, None)
    own = resolve(asked(max_steps=3), policy(default_agent="desk"), roles=admin, profiles=PROFILES)
    assert (own.agent, own.allowed_tools, own.max_steps) == (FREE_FORM_AGENT, None, 3)


def test_a_free_form_spec_is_the_tenants_to_allow():
    own = asked(agent="my-own", allowed_tools=["create_ticket"])
    with pytest.raises(PolicyDenied, match="free-form spec"):
        resolve(own, policy(), requester=MARIA, roles=RUNNER, profiles=PROFILES)
    # Admins (and the operator) may, by default; runners where the tenant says so.
    assert resolve(own, policy(), requester=OPERATOR, roles=frozenset({"admin"}), profiles=PROFILES)
    assert resolve(own, policy(free_form="runner"), roles=RUNNER, profiles=PROFILES)
    with pytest.raises(PolicyDenied):
        resolve(own, policy(free_form=None), roles=frozenset({"admin"}), profiles=PROFILES)
    # No profile to fall back on, and none named: refused, naming what to do.
    with pytest.raises(PolicyDenied, match="tenants set"):
        resolve(asked(), policy(), roles=RUNNER, profiles={})


def test_a_spec_holds_to_its_agents_profile():
    """It may narrow the tools and add approvals; widening, or dropping one, is refused or
    kept from happening."""
    narrowed = resolve(
        asked(agent="desk", allowed_tools=["create_ticket"]),
        policy(),
        roles=RUNNER,
        profiles=PROFILES,
    )
    assert narrowed.allowed_tools == ["create_ticket"]
    with pytest.raises(PolicyDenied, match="not add send_message"):
        resolve(
            asked(agent="desk", allowed_tools=["send_message"]),
            policy(),
            roles=RUNNER,
            profiles=PROFILES,
        )
    loosened = asked(
        agent="desk",
        approval={
            "always": [],
            "require_at_or_above": "high",
            "roles": {"create_ticket": "intern"},
            "requester_may_approve": True,
        },
    )
    run = resolve(loosened, policy(), roles=RUNNER, profiles=PROFILES)
    assert run.approval.always == ["create_ticket"]
    assert run.approval.role_for("create_ticket", {}) == "support"
    assert not run.approval.requester_may_approve
    tightened = asked(agent="desk", approval={"require_at_or_above": "low", "approvals_needed": 2})
    run = resolve(tightened, policy(), roles=RUNNER, profiles=PROFILES)
    assert run.approval.require_at_or_above == RiskLevel.LOW
    assert run.approval.approvers_for("search_notes", {}) == 2


def test_the_tenants_agents_are_the_only_ones_its_callers_run():
    with pytest.raises(PolicyDenied, match="not 'desk'"):
        resolve(asked(agent="desk"), policy(agents=["other"]), roles=RUNNER, profiles=PROFILES)


# ---------------------------------------------------------------- the tenant's rules


def test_the_tenants_rules_come_first_whatever_the_spec_says():
    rules = [
        parse_rule("refund when cents > 5000 by finance x2"),
        parse_rule("deny drop_table"),
        parse_rule("create_ticket by support"),
    ]
    spec = asked(
        allowed_tools=["refund", "drop_table", "create_ticket"],
        approval={"roles": {"refund": "intern", "create_ticket": "intern"}},
    )
    run = resolve(
        spec, policy(rules=rules, two_person=True), roles=frozenset({"admin"}), profiles={}
    )
    approval = run.approval
    assert approval.rules[:3] == rules
    assert run.allowed_tools == ["refund", "create_ticket"], "a tool denied outright is not offered"
    assert approval.denies("drop_table", {}) is not None
    assert approval.needs_approval("refund", RiskLevel.LOW, {"cents": 6000})
    assert approval.role_for("refund", {"cents": 6000}) == "finance"
    assert approval.approvers_for("refund", {"cents": 6000}) == 2
    # Below the condition, the spec's own role stands; the two-person rule holds for all.
    assert approval.role_for("refund", {"cents": 10}) == "intern"
    assert approval.role_for("create_ticket", {}) == "support"
    assert approval.approvers_for("create_ticket", {}) == 2


@given(
    st.lists(st.sampled_from(["a", "b", "*"]), max_size=3),
    st.booleans(),
    st.booleans(),
    st.integers(1, 3),
)
def test_resolving_twice_changes_nothing(tools: list[str], mine: bool, two: bool, n: int):
    """Backlogs resolve a task's run again before each attempt: the same run."""
    found = policy(
        rules=[ApprovalRule(tool=t) for t in tools], two_person=two, requester_may_approve=mine
    )
    spec = asked(approval={"approvals_needed": n, "rules": [{"tool": "c", "approvers": 2}]})
    once = resolve(spec, found, requester=MARIA)
    assert resolve(once, found) == once


# ---------------------------------------------------------------- conditions and merge patches


@pytest.mark.parametrize(
    ("when", "arguments", "met"),
    [
        ("cents > 5000", {"cents": 5001}, True),
        ("cents > 5000", {"cents": 5000}, False),
        ("cents > 5000", {"cents": "9000"}, True),  # text against a number: undecidable
        ("cents > 5000", {}, True),  # missing: undecidable, so the rule applies
        ('to != "ana@example.com"', {"to": "ana@example.com"}, False),
        ('to != "ana@example.com"', {}, True),
        ("order.total >= 10 and order.paid == true", {"order": {"total": 12, "paid": True}}, True),
        ("order.total >= 10 and order.paid == true", {"order": {"total": 12, "paid": 1}}, False),
    ],
)
def test_a_condition_that_cannot_be_decided_counts_as_met(when, arguments, met):
    assert ApprovalRule(tool="t", when=when).applies("t", arguments) is met


@pytest.mark.parametrize("text", ["t when cents >> 5", "t when cents > five", "deny t by x"])
def test_a_rule_that_does_not_read_is_refused(text: str):
    with pytest.raises(ValueError):
        parse_rule(text)


def test_merge_patches_as_rfc_7396_says():
    """The RFC's own example (appendix A) and the inbox's defect: removing `bcc`."""
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch.apply(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    sent = {"to": "ana@example.com", "bcc": "mallory@evil.example"}
    assert merge_patch.apply(sent, {"bcc": None}) == {"to": "ana@example.com"}
    assert merge_patch.between(sent, {"to": "ana@example.com"}) == {"bcc": None}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=2), json_values, max_size=4)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(objects, objects)
def test_the_diff_a_receipt_keeps_turns_the_proposal_into_what_ran(before, after):
    after = _without_nulls(after)
    assert merge_patch.apply(before, merge_patch.between(before, after)) == after


# ---------------------------------------------------------------- one function for every start


def _functions_calling(path: Path, name: str) -> set[str]:
    found = set()
    for node in ast.walk(parse_python(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    func = call.func
                    called = (
                        func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    )
                    if called == name:
                        found.add(node.name)
    return found


def test_every_start_path_resolves_its_policy_by_the_one_function():
    """The start gate's starts and backlog tasks, and every way a workflow makes a run's input
    (a tenant's read for a backlog's task, `run_agent` and an eval's case; a sub-agent
    within its parent) call `resolve`; nothing else makes a run's input from a spec. A
    new start path that skips it fails here (tests/test_door.py and test_run_starts.py hold
    every start to these two modules)."""
    door = ROOT / "agentledger" / "client" / "starts.py"
    starts = ROOT / "agentledger" / "workflows" / "run_starts.py"
    policy_module = ROOT / "agentledger" / "core" / "tenant_policy.py"
    assert _functions_calling(door, "resolve") == {"start", "backlog_tasks", "triggered"}
    assert _functions_calling(starts, "resolve") == {"within_parent"}
    assert _functions_calling(starts, "held_spec") == {"read_policy"}
    assert _functions_calling(policy_module, "resolve") == {"held_spec"}
    # `RunInput.of` makes a run's input from a spec: the resolver, the engine's generation
    # stamp (on an input the resolver made) and the input's own copy are the only callers.
    makers = set()
    for path in sorted((ROOT / "agentledger").rglob("*.py")):
        if _functions_calling(path, "of") and "RunInput.of" in path.read_text():
            makers.add(path.relative_to(ROOT).as_posix())
    assert makers == {
        "agentledger/core/tenant_policy.py",
        "agentledger/workflows/changes.py",
    }


def test_a_sub_agents_run_starts_under_the_policy_its_parent_started_with():
    """A sub-agent's spec (its profile's, in its parent's `subagents`) is resolved by the
    same function, under the tenant's policy its parent carries: the tenant's rules come
    first, and the parent's requester is the child's."""
    from agentledger.workflows.run_starts import within_parent

    rules = [parse_rule("send_message by finance x2")]
    parent = resolve(
        asked(subagents={"helper": {"instructions": "You help.", "agent": "helper"}}),
        policy(rules=rules, requester_may_approve=False),
        requester=MARIA,
    )
    child_spec = RunSpec.model_validate({"task": "help", **parent.subagents["helper"]})
    child = within_parent(parent, resolve(child_spec, policy())).spec
    assert child.approval.rules[0] == rules[0]
    assert child.requester == MARIA and child.tenant == "acme"
    assert not child.approval.requester_may_approve
    assert child.approval.role_for("send_message", {}) == "finance"
