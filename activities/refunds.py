"""This deployment's own side effect: recording a refund, once, in the refund ledger.

An activity of the business, not of the agent: `RefundReviewWorkflow` (workflows.refund_review)
calls it after the agent's approved answer. The ledger is a JSON-lines file injected by
worker.py (a real deployment would hold its payments client here instead); a retried
attempt finds its request already recorded and returns that record, so a refund is never
written twice.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pydantic import BaseModel
from temporalio import activity


class RefundOrder(BaseModel):
    request_id: str
    customer: str
    amount_usd: float
    agent_run_id: str


class RefundRecord(BaseModel):
    request_id: str
    customer: str
    amount_usd: float
    agent_run_id: str
    recorded_by: str


class RefundActivities:
    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    @activity.defn(name="refunds.record")
    async def record(self, order: RefundOrder) -> RefundRecord:
        return await asyncio.to_thread(self._record, order, activity.info().workflow_id or "")

    def _record(self, order: RefundOrder, workflow_id: str) -> RefundRecord:
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        self.ledger.touch()
        for line in self.ledger.read_text().splitlines():
            earlier = RefundRecord.model_validate_json(line)
            if earlier.request_id == order.request_id:
                return earlier
        record = RefundRecord(**order.model_dump(), recorded_by=workflow_id)
        with self.ledger.open("a") as ledger:
            ledger.write(json.dumps(record.model_dump()) + "\n")
        return record
