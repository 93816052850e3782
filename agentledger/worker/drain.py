"""A worker's drain on stop: the steps in hand finish within a grace period, and the log says
what happened to them.

Temporal's `graceful_shutdown_timeout` is how long a stopping worker lets its running
activities finish before it cancels them (a cancelled step is retried on another worker). The
count of steps in hand comes from an activity interceptor, so the line the worker logs when it
stops is the truth, not an intention.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

log = logging.getLogger(__name__)


class StepsInHand(Interceptor):
    """Counts the activities this process runs now, and those cancelled, across its workers."""

    def __init__(self) -> None:
        self.running = 0
        self.cancelled = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)


class _Counted(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, steps: StepsInHand) -> None:
        super().__init__(next)
        self._steps = steps

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        self._steps.running += 1
        try:
            return await self.next.execute_activity(input)
        except asyncio.CancelledError:
            self._steps.cancelled += 1
            raise
        finally:
            self._steps.running -= 1


class DrainReport:
    """Logs the drain as it begins and, once the workers have stopped, how it ended."""

    def __init__(self, steps: StepsInHand, grace_seconds: float, identity: str) -> None:
        self.steps = steps
        self.grace_seconds = grace_seconds
        self.identity = identity
        self._began = 0.0
        self._in_hand = 0
        self._cancelled_before = 0

    @property
    def begun(self) -> bool:
        """Whether the drain has begun (a stop was asked for)."""
        return self._began > 0

    def began(self) -> None:
        self._began = time.monotonic()
        self._in_hand = self.steps.running
        self._cancelled_before = self.steps.cancelled
        if self._in_hand:
            log.info(
                "stopping: %d step(s) in hand get up to %gs to finish (AGENTLEDGER_DRAIN_SECONDS)",
                self._in_hand,
                self.grace_seconds,
                extra={"identity": self.identity, "in_hand": self._in_hand},
            )

    def ended(self) -> None:
        took = time.monotonic() - self._began
        cut = self.steps.cancelled - self._cancelled_before
        fields = {"identity": self.identity, "in_hand": self._in_hand, "cancelled": cut}
        if not self._in_hand:
            log.info("stopped: no step was in hand", extra=fields)
        elif cut:
            log.warning(
                "stopped after %.1fs: %d of %d step(s) in hand did not finish within %gs and "
                "were cancelled; Temporal retries them on another worker",
                took,
                cut,
                self._in_hand,
                self.grace_seconds,
                extra=fields,
            )
        else:
            log.info(
                "stopped: the %d step(s) in hand finished in %.1fs",
                self._in_hand,
                took,
                extra=fields,
            )
