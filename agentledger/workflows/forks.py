"""A fork's start: the parent's steps before the fork point, taken as recorded.

`agentledger fork` starts a run whose input carries `fork`; before its first step, the run takes
the parent's steps up to the fork point as they were recorded (`fork.seed` only reads and
copies: no model call, tool call or side effect happens again), then goes on live from step N,
or with the edited output standing for step N's result.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from agentledger.workflows.recording import RunContext
from agentledger.workflows.tool_steps import tool_message

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.fork import ForkActivities
    from agentledger.core.events import EventType
    from agentledger.core.results import ForkOrigin
    from agentledger.core.states import RunStatus, StepStatus
    from agentledger.core.wire import ForkSeedInput, ProposedToolCall
    from agentledger.workflows import policies


async def seed_fork(run: RunContext, origin: ForkOrigin) -> list[ProposedToolCall]:
    """Take the parent's steps before the fork point; returns the calls of the parent's
    reply still to make, which the run makes live."""
    spec, progress, recorder = run.spec, run.progress, run.recorder
    seed = await workflow.execute_activity_method(
        ForkActivities.seed,
        ForkSeedInput(run_id=run.run_id, origin=origin, allowed_tools=spec.allowed_tools),
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=policies.retry_policy(spec, spec.timeouts.max_attempts),
        summary=f"fork of {origin.parent_run_id} from step {origin.from_step}",
    )
    for record in seed.steps:
        recorder.adopt(record)
    progress.seq = origin.from_step - 1
    progress.inherited_effects = seed.inherited_effects
    progress.model_calls = seed.model_calls
    progress.stored_messages = seed.stored_messages
    progress.pending_messages = []
    recorder.event(
        EventType.RUN_FORKED,
        data={
            "parent_run_id": origin.parent_run_id,
            "from_step": origin.from_step,
            "seeded_steps": [s.step_id for s in seed.steps],
            "edited": seed.edited_call is not None,
        },
    )
    if seed.edited_call is not None:
        call = seed.edited_call
        async with recorder.step(
            "tool_call", call.tool, input=call.arguments or {}, moves_status=False
        ) as step:
            step.end(StepStatus.COMPLETED, output=origin.edit_output)
        recorder.event(EventType.FORK_OUTPUT_EDITED, step.id, {"tool": call.tool, "ran": False})
        tool_message(progress, call.call_id, origin.edit_output)
    if seed.live_calls:
        # The fork goes on from inside its parent's reply, as a run does once the model
        # has answered (a queued run cannot wait for a tool or a person). Forks that
        # reached this point wedged before it: no history needs the old path.
        recorder.set_status(RunStatus.PLANNING)
    return seed.live_calls
