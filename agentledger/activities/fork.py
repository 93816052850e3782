"""`fork.seed`: start a fork from its parent's record, without repeating anything.

It reads the parent's steps and conversation from the mirror, copies the conversation up to
the fork point into the fork's own (so no model call before it is made again), links the
two runs, and hands the workflow the recorded steps to take as they are and the calls of
step N's reply still to make. It runs no tool and calls no model.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentledger.activities.proposals import proposed_call
from agentledger.core import forking
from agentledger.core.constants import ACTIVITY_FORK_SEED
from agentledger.core.errors import ForkError
from agentledger.core.wire import ForkSeed, ForkSeedInput
from agentledger.store.fork_store import ForkStore
from agentledger.tools import ToolRegistry


class ForkActivities:
    def __init__(self, store: ForkStore, registry: ToolRegistry) -> None:
        self.store = store
        self.registry = registry

    @activity.defn(name=ACTIVITY_FORK_SEED)
    async def seed(self, input: ForkSeedInput) -> ForkSeed:
        origin = input.origin
        steps, conversation = await self.store.record(origin.parent_run_id)
        try:
            plan = forking.plan(origin, steps, conversation)
        except ForkError as err:
            raise ApplicationError(str(err), type="ForkError", non_retryable=True) from err
        await self.store.seed(
            fork_run_id=input.run_id,
            parent_run_id=origin.parent_run_id,
            from_step=origin.from_step,
            edited=origin.edit_output is not None,
            prefix=plan.prefix,
        )
        calls = [
            proposed_call(
                self.registry,
                str(call.get("id", "")),
                str(call["function"]["name"]),
                str(call["function"].get("arguments") or "{}"),
                input.allowed_tools,
            )
            for call in plan.calls
        ]
        edited = calls[0] if calls and origin.edit_output is not None else None
        return ForkSeed(
            steps=plan.seeded,
            model_calls=plan.model_calls,
            stored_messages=len(plan.prefix),
            edited_call=edited,
            live_calls=calls[1:] if edited is not None else calls,
            inherited_effects=plan.inherited_effects,
        )
