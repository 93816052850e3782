"""An attempt's claim on its step, and its report: at once, or, for a quick attempt, as one.

A claim tells the mirror which worker runs the step (and applies the run's mirror batch the
activity carries); the report says how the attempt ended. Each is a Postgres round trip.
An attempt that nothing needs claimed before it runs (no ledger entry, no checkpoint to
resume from) defers its claim: if it ends within `QUICK_GRACE_SECONDS`, claim, batch and
report are written in one statement; if it is still running then, the claim is written at
that moment, as a claim-first attempt writes it, and the report when it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from agentledger.activities.leases import once_postgres_answers
from agentledger.core import faults
from agentledger.core.spec import JsonDict
from agentledger.store.mirror_store import AttemptEnd, MirrorStore

# Long enough for a quick tool (a lookup, a computation) to end before its claim is due,
# short enough that "what is my agent doing now" shows a slow one as running at once, and
# that its first lease renewal (a third of a heartbeat timeout, at least 0.2 s) has a row.
QUICK_GRACE_SECONDS = 0.1

ClaimWriter = Callable[[AttemptEnd | None, datetime], Awaitable[JsonDict]]


class StepClaim:
    """One attempt's claim and report. Claim-first: `begin` writes the claim and returns
    the step's saved checkpoint. Deferred: `begin` only starts the grace timer."""

    def __init__(
        self,
        store: MirrorStore,
        write_claim: ClaimWriter,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        heartbeat_seconds: float,
        carries_batch: bool,
    ) -> None:
        self._store = store
        self._write_claim = write_claim
        self._run_id = run_id
        self._step_id = step_id
        self._attempt = attempt
        self._heartbeat_seconds = heartbeat_seconds
        self._carries_batch = carries_batch
        self._started_at = datetime.now(UTC)
        self._timer: asyncio.Task[None] | None = None
        self._claim: asyncio.Task[JsonDict] | None = None

    async def begin(self, *, deferred: bool) -> JsonDict:
        if not deferred:
            return await self.written()
        self._timer = asyncio.create_task(self._after_grace())
        return {}

    async def _after_grace(self) -> None:
        await asyncio.sleep(QUICK_GRACE_SECONDS)
        self._timer = None
        self._start()

    def _start(self, end: AttemptEnd | None = None) -> asyncio.Task[JsonDict]:
        if self._claim is None:
            self.abandon()
            self._claim = asyncio.create_task(self._write(end))
        return self._claim

    async def written(self) -> JsonDict:
        """The claim, written now if it is not yet (a checkpoint needs its row first)."""
        return await asyncio.shield(self._start())

    async def end(self, end: AttemptEnd) -> None:
        """Report the attempt: with its claim in one statement when none was written."""
        if self._claim is None:
            await self._start(end)
            return
        await self.written()
        await self._store.end_attempt(
            run_id=self._run_id,
            step_id=self._step_id,
            attempt=self._attempt,
            status=end.status,
            output=end.output,
            error=end.error,
            tokens_in=end.tokens_in,
            tokens_out=end.tokens_out,
            cost_usd=end.cost_usd,
        )

    async def _write(self, end: AttemptEnd | None) -> JsonDict:
        saved = await once_postgres_answers(
            lambda: self._write_claim(end, self._started_at), self._heartbeat_seconds
        )
        if self._carries_batch:
            faults.fire("mirror.after_write")
        return saved

    def abandon(self) -> None:
        """Stop the grace timer. An attempt that leaves without a report (cancelled, or it
        raised before one) writes no claim not yet due: the run's batch goes again with its
        next write."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
