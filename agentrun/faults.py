"""Named fault points for crash tests: off, and free, unless AGENTRUN_FAULTS names them.

A fault point kills its own process with SIGKILL, the way a machine loss or an OOM kill
would: no cleanup, no final heartbeat, no chance to report.
"""

from __future__ import annotations

import os
import signal

ARMED: frozenset[str] = frozenset(
    name.strip() for name in os.environ.get("AGENTRUN_FAULTS", "").split(",") if name.strip()
)


def fire(point: str, target: str | None = None) -> None:
    """Die here if `point` (or `point:target`, e.g. `tool.after_effect:send_message`) is armed."""
    if ARMED and (point in ARMED or f"{point}:{target}" in ARMED):
        os.kill(os.getpid(), signal.SIGKILL)
