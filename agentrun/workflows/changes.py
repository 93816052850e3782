"""Which of the run workflow's changes a run takes: one patch marker per run, not one per change.

A change to what a workflow does goes behind `workflow.patched(id)`, so that histories
recorded before it replay along the old path. For every patch a run passes, Temporal records
a marker and (server 1.20 and later) upserts the `TemporalChangeVersion` search attribute:
two history events and a visibility write per patch, per run. With this workflow's twelve
patches that was 16 of the 87 events of a five-step run and eight of its visibility writes
(issue 15). A run started since generation 2 asks one patch, the generation's, and takes
every change the generation includes; a run from before it (a recorded history, a run in
flight through the deploy) asks each change's own patch, as it did. A change made later gets
a patch of its own until a next generation takes it in.

Generation 3 asks no patch at all: the engine writes the generation into the run's input
(`RunInput.workflow_generation`, `for_new_run`) when it starts the run, and the input is in
history, so a replay reads the same answer; the run pays no marker and no upsert. A run's
input names its generation only from generation 3 on; an input without one asks the
generation-2 patch, as before.

Generation 4 (issue 24): a run takes an admit signal only from the admission queue its input
names; an admit from any other sender is ignored. Runs of generation 3 and before took any.
"""

from __future__ import annotations

from temporalio import workflow

from agentrun.core._state import RunInput
from agentrun.core.spec import RunSpec

GENERATION_2 = "agentrun-generation-2"
# The generation `for_new_run` writes into a new run's input.
CURRENT_GENERATION = 4


def for_new_run(spec: RunSpec) -> RunInput:
    """The run's input as the engine starts it: `spec` (and what the engine set on it, if
    it is a `RunInput` already) with the generation new runs take."""
    return RunInput.of(spec, workflow_generation=CURRENT_GENERATION)


class Changes:
    def __init__(self, generation: int | None) -> None:
        # `generation`: what the run's input names. Without it, the patch is asked once, in
        # the run's first activation: replaying a history recorded before generation 2,
        # there is no marker and the answer is False.
        self.generation_3 = generation is not None and generation >= 3
        self.generation_4 = generation is not None and generation >= 4
        self.generation_2 = self.generation_3 or workflow.patched(GENERATION_2)

    def has(self, patch_id: str) -> bool:
        """Whether the run takes the change behind `patch_id`, one generation 2 includes."""
        return self.generation_2 or workflow.patched(patch_id)
