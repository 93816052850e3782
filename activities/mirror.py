"""Mirror writes the workflow asks for: run state, checkpoints and the receipt."""

from __future__ import annotations

from temporalio import activity

from agentrun import faults
from agentrun.constants import (
    ACTIVITY_CHECKPOINT_SAVE,
    ACTIVITY_MIRROR_SYNC,
    ACTIVITY_RECEIPT_RECORD,
)
from agentrun.mirror_store import MirrorStore
from agentrun.model_journal import ModelJournal
from agentrun.models import CheckpointInput, MirrorBatch, Receipt


class MirrorActivities:
    def __init__(self, store: MirrorStore, journal: ModelJournal) -> None:
        self.store = store
        self.journal = journal

    @activity.defn(name=ACTIVITY_MIRROR_SYNC)
    async def sync(self, batch: MirrorBatch) -> None:
        await self.store.sync(batch)
        faults.fire("mirror.after_write")

    @activity.defn(name=ACTIVITY_CHECKPOINT_SAVE)
    async def save_checkpoint(self, input: CheckpointInput) -> None:
        await self.store.save_run_checkpoint(input.run_id, input.checkpoint, input.fence)

    @activity.defn(name=ACTIVITY_RECEIPT_RECORD)
    async def record_receipt(self, receipt: Receipt) -> Receipt:
        """Complete the receipt with every retry the attempts journal saw, and what model
        responses the run paid for and never used (the model journal), then store it."""
        unaccepted_tokens, unaccepted_cost = await self.journal.unaccepted(receipt.run_id)
        receipt = receipt.model_copy(
            update={
                "retries": await self.store.retries(receipt.run_id),
                "unaccepted_tokens": unaccepted_tokens,
                "unaccepted_cost_usd": unaccepted_cost,
            }
        )
        await self.store.record_receipt(receipt)
        return receipt
