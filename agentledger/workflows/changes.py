"""Which of the run workflow's changes a run takes: its generation, named in its input.

The engine writes the generation into a new run's input (`RunInput.workflow_generation`,
`for_new_run`) when it starts the run, and the input is in history, so a replay reads the same
answer; the run pays no patch marker and no search-attribute upsert for it. A change to what
the run workflow does that must not reach runs already open takes the next generation, as a
switch here that the workflow tests.

Every generation this code runs takes the same paths: a run takes an admit signal only from
the admission queue its input names, and a run that ends failed or cancelled ends so in
Temporal too (Failed, Canceled; agentledger/workflows/run_endings.py). Runs of older
generations took paths since retired (agentledger/core/version_branches.py; docs/versioning.md
says which): such a run is refused here, by name, rather than replayed along paths it never
took. Its workflow task fails, and Temporal retries it until a worker of a build that still
has those paths takes it.
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
CURRENT_GENERATION = 5


def for_new_run(spec: RunSpec) -> RunInput:
    """The run's input as the engine starts it: `spec` (and what the engine set on it, if
    it is a `RunInput` already) with the generation new runs take."""
    return RunInput.of(spec, workflow_generation=CURRENT_GENERATION)


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
