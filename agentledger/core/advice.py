"""The commands that messages advise, written once, so that each works as written: one hop."""

from __future__ import annotations

from agentledger.core.constants import TASK_QUEUE


def worker_command(task_queue: str = TASK_QUEUE) -> str:
    """A worker that serves `task_queue`, as a person types it. A worker needs tools: the
    command serves the demo's, and a note names the flag for one's own."""
    queue = "" if task_queue == TASK_QUEUE else f"AGENTLEDGER_TASK_QUEUE={task_queue} "
    return f"`{queue}agentledger-worker --demo` (or `--tools PKG.MODULE:ATTR` for your tools)"


def start_a_worker(task_queue: str) -> str:
    return f"start one with {worker_command(task_queue)}"
