"""A business workflow that asks an agent: this deployment's own code, beside agentledger's engine.

A refund request comes in. The support-desk agent looks the policy up and tells the customer
(its message waits for a person's approval, with no worker held); once the agent's run has
completed, this workflow records the refund through the deployment's own activity. The agent
runs as a child workflow (`agentledger.workflows.run_agent`), so the whole chain is durable: a
crash anywhere resumes where it stopped, and the refund is recorded once.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.refunds import RefundActivities, RefundOrder, RefundRecord
    from agentledger import RunSpec
    from agentledger.workflows import run_agent


class RefundRequest(BaseModel):
    request_id: str
    customer: str
    amount_usd: float
    agent: RunSpec  # the agent's run, made by the starter from a profile (Agent.spec)


class RefundOutcome(BaseModel):
    request_id: str
    agent_run_id: str
    agent_status: str
    agent_answer: str | None
    refund: RefundRecord | None  # None: the agent did not complete, nothing was refunded


@workflow.defn(name="RefundReview")
class RefundReviewWorkflow:
    @workflow.run
    async def run(self, request: RefundRequest) -> RefundOutcome:
        result = await run_agent(request.agent, key=request.request_id)
        refund = None
        if result.status.value == "completed":
            refund = await workflow.execute_activity_method(
                RefundActivities.record,
                RefundOrder(
                    request_id=request.request_id,
                    customer=request.customer,
                    amount_usd=request.amount_usd,
                    agent_run_id=result.run_id,
                ),
                start_to_close_timeout=timedelta(seconds=30),
            )
        return RefundOutcome(
            request_id=request.request_id,
            agent_run_id=result.run_id,
            agent_status=result.status.value,
            agent_answer=result.answer,
            refund=refund,
        )
