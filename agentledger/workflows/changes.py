"""Which of the run workflow's changes a run takes: its generation, named in its input.

The engine writes the generation into a new run's input (`RunInput.workflow_generation`,
`for_new_run`) when it starts the run, and the input is in history, so a replay reads the same
answer; the run pays no patch marker and no search-attribute upsert for it. A change to what
the run workflow does that must not reach runs already open takes the next generation, as a
switch here that the workflow tests.

Generation 6, the one switch: an approver's edit is a JSON Merge Patch (RFC 7396: `null`
removes a member, an object merges into an object) or a whole replacement, checked against the
tool's schema as the arguments it leaves; runs of generation 5 lay an edit over the arguments
member by member. A call that would ask a person first looks up its tenant's standing
approvals (activity `approvals.standing`) when the tenant's policy lets approvers grant
any; runs of generation 5 always ask. And a run's model calls go to the run's own task
queue (started eagerly when the worker has a slot) unless its tenant has a model-call rate
(the run's input says so, or a call on its own queue is refused for it: `ModelCallsRated`),
and then to the rate-limited model queue from there on; runs of generation 5 send every
model call to the model queue.

Also in generation 6: a run's model calls are charged to its tenant, the credential that
started it and its agent, and admitted under their budgets (agentledger.core.budgets):
told to wrap up when a budget is nearly spent, ended `budget_exhausted` once it is; a
session's messages follow its double-texting policy (agentledger.workflows.sessions).
Runs of generation 5 and before are charged to nobody and take every message into the turn
in flight.

What the engine chooses for a new run where its spec leaves the choice to it is recorded in
its input the same way, so the choice replays with no switch: a read-only, low-risk tool runs
as a local activity (`local_read_only_tools`, `LOCAL_READ_ONLY_TOOLS`) unless its agent's
profile or its spec turns that off. A run whose input lacks the choice (None) runs every tool
as an activity of its own, as runs started before the engine chose did.

Every generation this code runs takes an admit signal only from the admission queue its input
names, and a run that ends failed or cancelled ends so in Temporal too (Failed, Canceled;
agentledger.workflows.run_endings). Runs of older generations took paths since retired
(agentledger.core.version_branches says which): such a run is refused
here, by name, rather than replayed along paths it never took. Its workflow task fails, and
Temporal retries it until a worker of a build that still has those paths takes it.
"""

from __future__ import annotations

from agentledger.core._state import RunInput
from agentledger.core.spec import RunSpec
from agentledger.core.version_branches import (
    OLDEST_GENERATION,
    RETIRED_NOTE,
    RETIRED_NOTES,
    retired_generation,
)

# The generation `for_new_run` writes into a new run's input.
CURRENT_GENERATION = 6
# Whether a new run whose spec leaves it to the engine runs its read-only, low-risk tools
# as local activities: a step then costs no task queue round trip, and a re-run after a
# crash cannot harm (agentledger.workflows.policies.runs_locally).
LOCAL_READ_ONLY_TOOLS = True


def for_new_run(spec: RunSpec) -> RunInput:
    """The run's input as the engine starts it: `spec` (and what the engine set on it, if
    it is a `RunInput` already) with the generation new runs take and the engine's choice
    for what the spec leaves to it."""
    chosen: dict[str, object] = {"workflow_generation": CURRENT_GENERATION}
    if spec.local_read_only_tools is None:
        chosen["local_read_only_tools"] = LOCAL_READ_ONLY_TOOLS
    return RunInput.of(spec, **chosen)


class RetiredBranchError(RuntimeError):
    """A run this code cannot replay: it needs a retired version branch."""


class Changes:
    """The run's generation, refused if this code no longer has the paths it took."""

    def __init__(self, generation: int | None) -> None:
        retired = retired_generation(generation)
        if retired is not None:
            raise RetiredBranchError(
                f"needs retired branch {retired}: this run's input names generation "
                f"{generation} ({RETIRED_NOTES.get(retired, RETIRED_NOTE)}); run it on a "
                f"build that replays generations before {OLDEST_GENERATION}"
            )
        self.generation = generation
        # The live generation switch (agentledger.core.version_branches: generation-6);
        # a run without a generation was refused above.
        self.generation_6 = generation is not None and generation >= 6
