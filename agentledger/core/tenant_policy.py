"""A tenant's policy as its runs carry it: read from Postgres by the start gate
(agentledger/client/starts.py) for a client's start, and through an activity by a workflow
that starts runs itself (a backlog's tasks, `run_agent`; agentledger/workflows/run_starts.py),
so that every run, whatever started it, carries the same."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentledger.core._state import RunInput
from agentledger.core.admission_models import TenantLimits, admission_id
from agentledger.core.results import ForkOrigin
from agentledger.core.spec import RunSpec, Signer


class PolicyInput(BaseModel):
    tenant: str = Field(min_length=1, max_length=200)


class RunPolicy(BaseModel):
    """What a tenant's runs must carry, as Postgres holds it now."""

    limits: TenantLimits
    signers: list[Signer] = Field(default_factory=list)


def with_policy(spec: RunSpec, found: RunPolicy, *, fork: ForkOrigin | None = None) -> RunInput:
    """The run's input: the spec with the tenant's weight, whether its model calls go through
    the tenant's rate, its approvers in its approval policy (a spec's own signers are added
    to them, never put in their place), and a fork's origin."""
    run = RunInput.of(
        spec,
        fairness_weight=found.limits.weight,
        model_calls_rated=found.limits.model_calls_per_second is not None,
        fork=fork,
    )
    if not found.signers:
        return run
    known = {s.key_id for s in found.signers}
    signers = [*found.signers, *(s for s in run.approval.signers if s.key_id not in known)]
    approval = run.approval.model_copy(update={"signers": signers})
    return run.model_copy(update={"approval": approval})


def held_spec(spec: RunSpec, found: RunPolicy) -> RunInput:
    """A run a workflow starts as its own child, under its tenant's policy: with a cap, it
    names its tenant's queue and waits there for a slot (the parent then holds it there,
    activity `admission.hold`)."""
    run = with_policy(spec, found)
    if found.limits.capped:
        run = run.model_copy(update={"admission": admission_id(run.tenant)})
    return run
