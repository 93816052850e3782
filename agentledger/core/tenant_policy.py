"""The one function every run's policy is resolved by: `resolve`.

Every way a run starts calls it, with what it knows: the start gate
(agentledger.client.starts) for a start, a fork, a backlog's tasks as they are enqueued,
with the caller and the operator's agent profiles; the workflows that start runs themselves
(a backlog's task, `run_agent`, an eval's case, a sub-agent;
agentledger.workflows.run_starts) with the tenant's policy read through an activity, or
carried by the parent. Pure (no I/O, no clock), so it runs inside a
workflow too. A test fails if a start path bypasses it.

What it makes of a spec:
- a spec that names one of the operator's agent profiles is held to that profile: it may
  narrow its tools and sub-agents and add approvals, never widen or remove them;
- a spec that names none is free-form (recorded as agent `(free-form)`): only a caller in
  the tenant's `free_form` role (and the operator) may send one; anyone else's start without
  an agent runs the tenant's default agent, and so does a task alone from anyone when the
  operator named that default for the tenant (`tenants set T --default-agent A`);
- the tenant's approval rules come first in every run's approval policy, whatever the spec
  says; its approvers are added to the spec's (never replaced); whether a requester may
  approve their own run and the two-person rule can only be tightened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agentledger.core._state import RunInput
from agentledger.core.admission_models import TenantLimits, admission_id
from agentledger.core.errors import InvalidRequest, PolicyDenied
from agentledger.core.identity import Identity
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.results import ForkOrigin
from agentledger.core.spec import RISK_ORDER, ApprovalPolicy, JsonDict, RunSpec, Signer

# What a spec sets of its approval policy as it likes: how long people have, what a
# rejection does. Every other field is policy, and only tightens what the agent sets.
FREE_APPROVAL_FIELDS = ("timeout_seconds", "on_reject")
# The spec fields an agent's profile holds a run to.
HELD_FIELDS = ("allowed_tools", "approval", "subagents", "local_read_only_tools")
# What a start says about the request, not the work: a spec that sets nothing else asks for
# no work of its own.
REQUEST_FIELDS = frozenset({"task", "tenant", "user", "idempotency_key", "priority"})


class PolicyInput(BaseModel):
    tenant: str = Field(min_length=1, max_length=200)
    charged_to: str | None = Field(
        None, description="the credential the run would be charged to, whose budgets count too"
    )


class RunPolicy(BaseModel):
    """What a tenant's runs must carry, as Postgres holds it now."""

    limits: TenantLimits
    signers: list[Signer] = Field(default_factory=list)
    budget_refusal: str | None = Field(
        None,
        description="read for a workflow's start: why a spent enforcing budget refuses it now "
        "(agentledger/core/budgets.py); None: it may start",
    )
    tenant_policy: TenantPolicy = Field(default_factory=TenantPolicy)


def may_write_specs(policy: TenantPolicy, roles: frozenset[str]) -> bool:
    """Whether a caller with `roles` may start a run from a spec of its own."""
    if policy.free_form is None:
        return False
    return "admin" in roles or (policy.free_form == "runner" and "runner" in roles)


def default_agent(policy: TenantPolicy, profiles: Mapping[str, JsonDict]) -> str | None:
    """What a start that names no agent runs: the tenant's default agent, else the only
    profile loaded."""
    if policy.default_agent is not None:
        return policy.default_agent
    return next(iter(profiles)) if len(profiles) == 1 else None


def resolve(
    spec: RunSpec,
    found: RunPolicy,
    *,
    requester: Identity | None = None,
    roles: frozenset[str] | None = None,
    profiles: Mapping[str, JsonDict] | None = None,
    fork: ForkOrigin | None = None,
) -> RunInput:
    """The run's input: `spec` under its tenant's policy `found`.

    `requester`: who asks, as their credential proved it (recorded on the run; None keeps
    the one a run input carries: a backlog's task, a sub-agent's). `roles`: the roles of a
    caller whose own spec this is, so the agents and free-form specs the tenant allows are
    checked (None: a spec checked when it was asked for, or a deployment's own workflow's).
    `profiles`: the operator's agents' spec fields by name (None inside a workflow: the door
    held the spec to its profile already). Raises PolicyDenied for what the policy forbids.
    """
    rules = found.tenant_policy
    if profiles is not None:
        spec = _held_to_profile(spec, rules, roles, profiles)
    approval = spec.approval
    known = {s.key_id for s in found.signers}
    approval = approval.model_copy(
        update={
            "signers": [*found.signers, *(s for s in approval.signers if s.key_id not in known)],
            "rules": [*rules.rules, *(r for r in approval.rules if r not in rules.rules)],
            "requester_may_approve": approval.requester_may_approve and rules.requester_may_approve,
            "approvals_needed": max(approval.approvals_needed, 2 if rules.two_person else 1),
        }
    )
    denied = {r.tool for r in approval.rules if r.deny and r.when is None}
    engine: dict[str, Any] = {
        "fairness_weight": found.limits.weight,
        "model_calls_rated": found.limits.model_calls_per_second is not None,
        "fork": fork,
        "tenant_policy": rules,
    }
    if requester is not None:
        engine["requester"] = requester
    run = RunInput.of(spec, **engine)
    update: dict[str, Any] = {"approval": approval}
    if run.allowed_tools is not None and denied & set(run.allowed_tools):
        update["allowed_tools"] = [t for t in run.allowed_tools if t not in denied]
    return run.model_copy(update=update)


def held_spec(spec: RunSpec, found: RunPolicy) -> RunInput:
    """A run a workflow starts as its own child, under its tenant's policy: with a cap, it
    names its tenant's queue and waits there for a slot (the parent then holds it there,
    activity `admission.hold`)."""
    run = resolve(spec, found)
    if found.limits.capped:
        run = run.model_copy(update={"admission": admission_id(run.tenant)})
    return run


def _held_to_profile(
    spec: RunSpec,
    rules: TenantPolicy,
    roles: frozenset[str] | None,
    profiles: Mapping[str, JsonDict],
) -> RunSpec:
    profile = profiles.get(spec.agent)
    if profile is None and roles is not None:
        fallback = _fallback_agent(spec, rules, roles, profiles)
        if fallback is not None:
            spec = spec.model_copy(update={"agent": fallback})
            profile = profiles[fallback]
        elif not may_write_specs(rules, roles):
            raise PolicyDenied(_no_free_form(spec, rules, profiles))
    if profile is None:
        return spec  # free-form, from a caller the tenant lets write specs
    limited = roles is not None and "admin" not in roles
    if limited and rules.agents is not None and spec.agent not in rules.agents:
        raise PolicyDenied(
            f"the tenant's policy lets its callers run agent(s) "
            f"{', '.join(rules.agents) or 'none'}, not {spec.agent!r}; an admin changes it "
            f"with `agentledger tenants set TENANT --agents "
            f"{','.join([*rules.agents, spec.agent])}`"
        )
    return within(spec, _spec_of(profile, spec.task, spec.agent))


def _fallback_agent(
    spec: RunSpec, rules: TenantPolicy, roles: frozenset[str], profiles: Mapping[str, JsonDict]
) -> str | None:
    """The profile a start that names no agent runs, if any. A caller who may not write
    specs runs the tenant's default agent. One who may runs the default only where the
    operator named it for the tenant and the start asks for nothing of its own (a task,
    with who, how urgent and its key): a spec of one's own stays free-form, and so does a
    task where the only profile loaded is a default nobody chose (the demo's, beside an
    operator's own tools)."""
    if "agent" in spec.model_fields_set:
        return None
    if may_write_specs(rules, roles):
        named = rules.default_agent
        alone = spec.model_fields_set <= REQUEST_FIELDS
        return named if alone and named is not None and named in profiles else None
    fallback = default_agent(rules, profiles)
    return fallback if fallback is not None and fallback in profiles else None


def _no_free_form(spec: RunSpec, rules: TenantPolicy, profiles: Mapping[str, JsonDict]) -> str:
    allowed = rules.agents if rules.agents is not None else sorted(profiles)
    who = {"runner": "runners and admins", "admin": "admins"}.get(rules.free_form or "", "")
    named = (
        f"agent {spec.agent!r} is not a profile, so this"
        if "agent" in spec.model_fields_set
        else "this"
    )
    return (
        f"{named} is a free-form spec, which the tenant's policy lets "
        f"{who or 'operators alone'} start; name one of its agents "
        f"({', '.join(allowed) or 'none loaded'}), or an operator allows more with "
        "`agentledger tenants set TENANT --free-form runner`"
    )


def _spec_of(fields: JsonDict, task: str, agent: str) -> RunSpec:
    try:
        return RunSpec.model_validate({**fields, "task": task, "agent": agent})
    except ValidationError as err:
        raise InvalidRequest(f"agent {agent!r}'s profile is not a run spec: {err}") from err


def within(asked: RunSpec, base: RunSpec) -> RunSpec:
    """`asked` held to `base` (an agent's profile): its own fields where it sets them, but its
    tools and sub-agents only narrowed and its approvals only added to."""
    given = asked.model_fields_set
    fields = {
        k: getattr(asked, k) for k in given if k in RunSpec.model_fields and k not in HELD_FIELDS
    }
    if "allowed_tools" in given and asked.allowed_tools is not None:
        fields["allowed_tools"] = _narrowed_tools(asked.allowed_tools, base)
    if "approval" in given:
        fields["approval"] = tighter(base.approval, asked.approval)
    if "subagents" in given:
        fields["subagents"] = _narrowed_subagents(asked, base)
    if "local_read_only_tools" in given:
        fields["local_read_only_tools"] = local_tools(asked.local_read_only_tools, base)
    return base.model_copy(update=fields)


def local_tools(asked: bool | None, base: RunSpec) -> bool | None:
    """Whether a run of `base` (an agent's profile) runs its read-only tools locally when a
    spec asks `asked`: a spec may turn that off, never on where the profile turned it off
    (an activity of its own is the stricter path: its own heartbeat, its own task); None
    leaves the choice to the engine."""
    if asked is False or base.local_read_only_tools is False:
        return False
    return asked if asked is not None else base.local_read_only_tools


def _narrowed_tools(asked: list[str], base: RunSpec) -> list[str]:
    if base.allowed_tools is None:
        return asked
    extra = [t for t in asked if t not in base.allowed_tools]
    if extra:
        raise PolicyDenied(
            f"agent {base.agent!r} may call {', '.join(base.allowed_tools) or 'no tool'}; a "
            f"spec may narrow that, not add {', '.join(extra)}"
        )
    return asked


def _narrowed_subagents(asked: RunSpec, base: RunSpec) -> dict[str, JsonDict]:
    extra = [name for name in asked.subagents if name not in base.subagents]
    if extra:
        raise PolicyDenied(
            f"agent {base.agent!r} delegates to {', '.join(base.subagents) or 'no agent'}; a "
            f"spec may narrow that, not add {', '.join(extra)}"
        )
    narrowed: dict[str, JsonDict] = {}
    for name, fields in asked.subagents.items():
        child = within(_spec_of(fields, "-", name), _spec_of(base.subagents[name], "-", name))
        narrowed[name] = child.model_dump(mode="json", exclude={"task"}, exclude_unset=True)
    return narrowed


def tighter(base: ApprovalPolicy, asked: ApprovalPolicy) -> ApprovalPolicy:
    """`base` with what `asked` adds: a lower risk threshold, more tools that always ask,
    more rules, more approvers needed, signatures; its own timeout and rejection handling.
    Roles stay the base's wherever it names them; an allow-list of approvers only narrows."""
    given = asked.model_fields_set
    update: dict[str, Any] = {k: getattr(asked, k) for k in FREE_APPROVAL_FIELDS if k in given}
    if RISK_ORDER[asked.require_at_or_above] < RISK_ORDER[base.require_at_or_above]:
        update["require_at_or_above"] = asked.require_at_or_above
    update["always"] = [*base.always, *(t for t in asked.always if t not in base.always)]
    update["roles"] = {**asked.roles, **base.roles}
    if base.approvers and asked.approvers:
        outside = [a for a in asked.approvers if a not in base.approvers]
        if outside:
            raise PolicyDenied(
                f"only {', '.join(base.approvers)} may decide this agent's approvals; a spec "
                f"may narrow that, not add {', '.join(outside)}"
            )
    update["approvers"] = asked.approvers or base.approvers
    known = {s.key_id for s in base.signers}
    update["signers"] = [*base.signers, *(s for s in asked.signers if s.key_id not in known)]
    update["require_signatures"] = base.require_signatures or asked.require_signatures
    update["signature_max_age_seconds"] = min(
        base.signature_max_age_seconds, asked.signature_max_age_seconds
    )
    update["rules"] = [*base.rules, *(r for r in asked.rules if r not in base.rules)]
    update["requester_may_approve"] = base.requester_may_approve and asked.requester_may_approve
    update["approvals_needed"] = max(base.approvals_needed, asked.approvals_needed)
    return base.model_copy(update=update)
