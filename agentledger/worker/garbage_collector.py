"""The worker process's garbage collector, set for a heap of many cached runs.

A worker keeps up to `AGENTLEDGER_WORKFLOW_CACHE` runs in memory, each with its own sandbox of
modules, and Python's collector walks the long-lived heap on a schedule set for small
programs (a young collection every 700 allocations): with many runs in flight that walk
was a tenth of the worker's CPU (the bench's worker-share figures). Once the worker is
built, what it has loaded (the SDK, the workflow code, the tools) is frozen out of every
collection, and young collections wait for `threshold` allocations. Reference counting
still frees everything that is not a cycle at once; only cyclic garbage waits longer.
"""

from __future__ import annotations

import gc

# How many older collections wait for one of the next generation (Python's own: 10).
OLDER_GENERATIONS = 20


def settle(threshold: int) -> None:
    """Freeze what the process has loaded and space out collections; 0 leaves Python's."""
    if threshold <= 0:
        return
    gc.collect()  # what is garbage now is freed, not frozen for ever
    gc.freeze()
    gc.set_threshold(threshold, OLDER_GENERATIONS, OLDER_GENERATIONS)
