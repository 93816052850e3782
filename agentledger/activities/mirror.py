"""Mirror writes the workflow asks for: run state, checkpoints and the receipt; and, once a
write holds what a tenant's notification webhooks are told, the run's notifier
(agentledger.activities.run_notices)."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from agentledger.activities.agent_metrics import record_mirror_lag
from agentledger.activities.agent_spans import AgentSpans
from agentledger.activities.run_notices import RunNotices
from agentledger.core import faults
from agentledger.core.constants import (
    ACTIVITY_CHECKPOINT_SAVE,
    ACTIVITY_MIRROR_FINISH,
    ACTIVITY_MIRROR_SYNC,
    ACTIVITY_RECEIPT_RECORD,
)
from agentledger.core.results import INTERRUPTED, Receipt
from agentledger.core.wire import CheckpointInput, FinishInput, MirrorBatch, ReceiptChanges
from agentledger.store import ledger
from agentledger.store.mirror_store import MirrorStore
from agentledger.store.model_journal import ModelJournal
from agentledger.store.refused_data import REFUSED_DATA_ERRORS

HAPPENED = "happened before the cancel took effect (ledger)"
NOT_HAPPENED = "did not happen: the cancel stopped it first (no ledger row)"


class MirrorActivities:
    def __init__(
        self,
        store: MirrorStore,
        journal: ModelJournal,
        spans: AgentSpans | None = None,
        notices: RunNotices | None = None,
    ) -> None:
        self.store = store
        self.journal = journal
        self.spans = spans or AgentSpans(enabled=False)
        self.notices = notices

    @activity.defn(name=ACTIVITY_MIRROR_SYNC)
    async def sync(self, batch: MirrorBatch) -> None:
        record_mirror_lag(batch)
        await self.store.sync(batch)
        faults.fire("mirror.after_write")
        await self._told(batch)

    async def _told(self, batch: MirrorBatch) -> None:
        if self.notices is not None:
            await self.notices.written(batch)

    @activity.defn(name=ACTIVITY_CHECKPOINT_SAVE)
    async def save_checkpoint(self, input: CheckpointInput) -> None:
        await self.store.save_run_checkpoint(input.run_id, input.checkpoint, input.fence)

    @activity.defn(name=ACTIVITY_RECEIPT_RECORD)
    async def record_receipt(self, receipt: Receipt) -> Receipt:
        """Complete the receipt (`_completed`), then store it."""
        async with self.store.pool.connection() as conn:
            receipt = await self._completed(conn, receipt)
        await self.store.record_receipt(receipt)
        self.spans.run_ended(receipt)
        return receipt

    @activity.defn(name=ACTIVITY_MIRROR_FINISH)
    async def finish(self, input: FinishInput) -> Receipt | ReceiptChanges:
        """The run's last rows, then its receipt: one activity where a run ends, not two
        (a run from before generation 2 schedules `mirror.sync`, then `receipts.record`),
        and one transaction. Data Postgres refuses there is written as `sync` and
        `record_receipt` write it, the refused rows recorded in `mirror_failures`."""
        record_mirror_lag(input.batch)
        try:
            receipt = await self.store.finish(
                input.batch, lambda conn: self._completed(conn, input.receipt)
            )
        except REFUSED_DATA_ERRORS:
            await self.sync(input.batch)
            return await self.record_receipt(input.receipt)
        faults.fire("mirror.after_write")
        await self._told(input.batch)
        self.spans.run_ended(receipt)  # last, so an attempt that fails before makes none
        # The workflow reads nothing back; what the activity added, history keeps (the whole
        # receipt again would be about 2 KB of a short run's history).
        return ReceiptChanges.between(input.receipt, receipt)

    async def _completed(self, conn: Any, receipt: Receipt) -> Receipt:
        """The receipt with every retry the attempts journal saw, and what model responses
        the run paid for and never used (the model journal), read on `conn`."""
        unaccepted_tokens, unaccepted_cost = await self.journal.unaccepted(receipt.run_id, conn)
        receipt = await self._settle_interrupted(conn, receipt)
        return receipt.model_copy(
            update={
                "retries": await self.store.retries(receipt.run_id, conn),
                "unaccepted_tokens": unaccepted_tokens,
                "unaccepted_cost_usd": unaccepted_cost,
            }
        )

    async def _settle_interrupted(self, conn: Any, receipt: Receipt) -> Receipt:
        """Side effects whose call a cancel stopped: the ledger says whether they happened
        (its row commits with the effect); one it cannot settle is named unresolved."""
        keys = [e.idempotency_key for e in receipt.side_effects if e.reconciliation == INTERRUPTED]
        if not keys:
            return receipt
        found = await ledger.entries(conn, keys)
        effects, unresolved = [], list(receipt.unresolved)
        for effect in receipt.side_effects:
            if effect.reconciliation == INTERRUPTED:
                status, result = found.get(effect.idempotency_key, ("absent", None))
                if status == "done":
                    effect = effect.model_copy(
                        update={"ok": True, "output": result, "reconciliation": HAPPENED}
                    )
                elif status == "absent":
                    effect = effect.model_copy(update={"reconciliation": NOT_HAPPENED})
                else:
                    unresolved.append(
                        f"{effect.step_id}: whether {effect.tool} happened is unknown "
                        f"(key {effect.idempotency_key}): the run was cancelled mid-effect"
                    )
            effects.append(effect)
        return receipt.model_copy(update={"side_effects": effects, "unresolved": unresolved})
