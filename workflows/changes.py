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
"""

from __future__ import annotations

from temporalio import workflow

GENERATION_2 = "agentrun-generation-2"


class Changes:
    def __init__(self) -> None:
        # Asked once, in the run's first activation: replaying a history recorded before
        # generation 2, there is no marker and the answer is False.
        self.generation_2 = workflow.patched(GENERATION_2)

    def has(self, patch_id: str) -> bool:
        """Whether the run takes the change behind `patch_id`, one generation 2 includes."""
        return self.generation_2 or workflow.patched(patch_id)
