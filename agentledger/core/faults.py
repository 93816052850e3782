"""Named fault points for crash tests: off, and free, unless a test installs a plan.

A fault point kills its own process with SIGKILL, the way a machine loss or an OOM kill
would: no cleanup, no final heartbeat, no chance to report. `tool.zombie` is the exception:
it makes the first attempt of a tool call hang past its timeout instead, ignore
cancellation, then carry on and try to write its result late.

A plan names points, each optionally narrowed to one tool or model
(`tool.after_effect:send_message`). Only the chaos suite and tests install one
(`chaos.faulty_worker` from AGENTLEDGER_FAULTS): no setting of a user's arms a fault.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass

POINTS: dict[str, str] = {
    "tool.before_run": "the tool has not run; its attempt is claimed unless it is quick",
    "tool.after_effect": "the tool answered and committed, the activity has not returned",
    "tool.after_external_effect": "an external effect happened, its record is not written",
    "model.after_response": "the model answered and was journaled, the activity has not returned",
    "mirror.after_write": "a mirror batch committed, its completion is not reported",
    "mirror.in_transaction": "a mirror batch is written but not committed",
    "receipt.in_write": "the receipt is written but not committed",
    "tool.zombie": "attempt 1 hangs past its timeout, ignores cancellation, then writes late",
}


@dataclass(frozen=True)
class FaultPlan:
    """The armed points, and how long `tool.zombie` hangs."""

    points: frozenset[str] = frozenset()
    zombie_seconds: float = 12.0

    @classmethod
    def parse(cls, points: str, zombie_seconds: float = 12.0) -> FaultPlan:
        """`point[:tool or model],...`; an unknown point is refused, not ignored."""
        named = frozenset(name.strip() for name in points.split(",") if name.strip())
        unknown = sorted(n for n in named if n.partition(":")[0] not in POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {unknown}; known: {sorted(POINTS)}")
        return cls(named, zombie_seconds)


_plan = FaultPlan()


def install(plan: FaultPlan) -> None:
    """Arm `plan` in this process (the chaos suite's and tests' workers only)."""
    global _plan
    _plan = plan


def armed(point: str, target: str | None = None) -> bool:
    points = _plan.points
    return bool(points) and (point in points or f"{point}:{target}" in points)


def fire(point: str, target: str | None = None) -> None:
    """Die here if `point` (or `point:target`, e.g. `tool.after_effect:send_message`) is armed."""
    if armed(point, target):
        os.kill(os.getpid(), signal.SIGKILL)


async def zombie(target: str | None, attempt: int) -> None:
    """If `tool.zombie` is armed, hang attempt 1 past its timeout, deaf to cancellation."""
    if attempt != 1 or not armed("tool.zombie", target):
        return
    # Longer than the step's heartbeat timeout, so another attempt takes the step over and
    # finishes it before the zombie wakes.
    deadline = time.monotonic() + _plan.zombie_seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            continue  # a zombie does not listen
