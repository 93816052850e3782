"""Which of the run workflow's changes a run takes: its generation, named in its input.

The engine writes the generation into a new run's input (`RunInput.workflow_generation`,
`for_new_run`) when it starts the run, and the input is in history, so a replay reads the same
answer; the run pays no patch marker and no search-attribute upsert for it. A change to what
the run workflow does that must not reach runs already open takes the next generation.

Generation 4: a run takes an admit signal only from the admission queue its input
names; an admit from any other sender is ignored. Runs of generation 3 took any.

Generation 5: a run that ends failed or cancelled ends so in Temporal too (Failed,
Canceled; agentledger/workflows/run_endings.py); runs of generation 4 and before return their
result whatever their status, so Temporal shows them Completed.

Generation 6: an approver's edit is a JSON Merge Patch (RFC 7396: `null` removes a member,
an object merges into an object) or a whole replacement, checked against the tool's schema
as the arguments it leaves; runs of generation 5 and before lay an edit over the arguments
member by member. A call that would ask a person first looks up its tenant's standing
approvals (activity `approvals.standing`) when the tenant's policy lets approvers grant
any; runs of generation 5 and before always ask. And a run's model calls go to the run's
own task queue (started eagerly when the worker has a slot) unless its tenant has a
model-call rate (the run's input says so, or a call on its own queue is refused for it:
`ModelCallsRated`), and then to the rate-limited model queue from there on; runs of
generation 5 send every model call to the model queue.

Runs of generation 2 and before (no generation in their input) took the patch-era paths
since retired (agentledger/core/version_branches.py; their history is in docs/versioning.md):
such a run is refused here,
by name, rather than replayed along paths it never took. Its workflow task fails, and Temporal
retries it until a worker of a build that still has those paths takes it.
"""

from __future__ import annotations

from agentledger.core._state import RunInput
from agentledger.core.spec import RunSpec
from agentledger.core.version_branches import OLDEST_GENERATION, RETIRED_GENERATIONS, RETIRED_NOTE

# The generation `for_new_run` writes into a new run's input.
CURRENT_GENERATION = 6


def for_new_run(spec: RunSpec) -> RunInput:
    """The run's input as the engine starts it: `spec` (and what the engine set on it, if
    it is a `RunInput` already) with the generation new runs take."""
    return RunInput.of(spec, workflow_generation=CURRENT_GENERATION)


class RetiredBranchError(RuntimeError):
    """A run this code cannot replay: it needs a retired version branch."""


class Changes:
    def __init__(self, generation: int | None) -> None:
        if generation is None or generation < OLDEST_GENERATION:
            raise RetiredBranchError(
                f"needs retired branch {RETIRED_GENERATIONS}: this run's input names "
                f"generation {generation} ({RETIRED_NOTE}); run it on a build from before "
                "issue 28"
            )
        # The live generation switches (agentledger/core/version_branches.py: generation-4,
        # generation-5 and generation-6).
        self.generation_4 = generation >= 4
        self.generation_5 = generation >= 5
        self.generation_6 = generation >= 6
