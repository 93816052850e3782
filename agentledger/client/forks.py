"""`agentledger fork`: a new run from another's recorded steps, with an edited output.

The parent is only read: its spec from Temporal (the input of its latest generation), its
steps and conversation from the mirror. The fork is a run of its own, with its own id and
receipt; `fork.seed` links the two in `run_forks`, and each receipt names the other.
"""

from __future__ import annotations

import hashlib
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client import starts
from agentledger.client.scope import Scope, no_run
from agentledger.core import bounds, forking
from agentledger.core._state import RunInput
from agentledger.core.errors import (
    InvalidRequest,
    OperationError,
    RunNotFound,
)
from agentledger.core.keys import canonical_json
from agentledger.core.results import ForkOrigin
from agentledger.core.run_reports import Started
from agentledger.store.fork_store import ForkStore


async def parent_input(client: Client, run_id: str) -> RunInput:
    """The input the parent was started with (its latest generation's)."""
    try:
        history = await client.get_workflow_handle(run_id).fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(run_id) from err
        raise
    first = history.events[0]
    if first.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        raise OperationError(f"run {run_id}'s history does not start with its input")
    payloads = first.workflow_execution_started_event_attributes.input.payloads
    [parent] = await client.data_converter.decode(payloads, [RunInput])
    assert isinstance(parent, RunInput)
    return parent


async def effect_scope(client: Client, run_id: str, spec: RunInput) -> str:
    """The scope the parent keys its effects in (agent_run's `_effect_key`): the fork keys its
    own in it too, so what the parent did is found in the ledger, not done again."""
    if spec.fork is not None:
        return spec.fork.effect_scope or run_id
    if spec.idempotency_key:
        described = await client.get_workflow_handle(run_id).describe()
        if described.parent_id:  # a backlog task's attempt: its effects are the task's
            return f"{described.parent_id}/{spec.idempotency_key}"
    return run_id


def default_key(parent_run_id: str, from_step: int, edit_output: Any) -> str:
    """The same fork asked for twice is one run; a different edit is another."""
    digest = hashlib.sha256(canonical_json(edit_output).encode()).hexdigest()[:8]
    return f"{parent_run_id.removeprefix('run-')}.fork{from_step}-{digest}"


async def fork_run(
    scope: Scope,
    run_id: str,
    *,
    from_step: int,
    edit_output: Any = None,
    key: str | None = None,
) -> Started:
    """Fork `run_id` (only a run the caller sees: another tenant's reads as missing); the
    fork is a run of the parent's tenant, started through the gate (starts.py)."""
    if from_step < 1:
        raise InvalidRequest(f"--from-step takes a step number, 1 or more, not {from_step}")
    origin = ForkOrigin(parent_run_id=run_id, from_step=from_step, edit_output=edit_output)
    bounds.check(origin, "fork")
    bounds.check_text("idempotency_key", key)
    await scope.check_visible(run_id)
    client = await scope.temporal()
    pool = await scope.database()
    steps, conversation = await ForkStore(pool).record(run_id)
    if not steps:
        raise RunNotFound(f"run {run_id} has no steps in the mirror to fork from")
    forking.plan(origin, steps, conversation)  # refuse here (a ForkError), before anything starts
    parent = await parent_input(client, run_id)
    origin.effect_scope = await effect_scope(client, run_id, parent)
    # What the engine set for the parent is the parent's: the fork gets its own at the gate.
    fork_spec = parent.spec().model_copy(
        update={"idempotency_key": key or default_key(run_id, from_step, edit_output)}
    )
    return await starts.start(scope, fork_spec, fork=origin)
