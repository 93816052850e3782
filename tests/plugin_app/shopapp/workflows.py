"""The shop's own workflow: it checks an order, then asks an agent to tell the customer."""

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentledger import RunSpec
    from agentledger.workflows import run_agent
    from shopapp.activities import Order, check_order


@dataclass
class Review:
    checked: str
    agent_run_id: str
    agent_status: str
    agent_answer: str | None


@workflow.defn
class OrderReview:
    @workflow.run
    async def run(self, order: Order) -> Review:
        checked = await workflow.execute_activity(
            check_order, order, start_to_close_timeout=timedelta(seconds=30)
        )
        task = f"Look up our refund policy and notify {order.customer} about it. ({checked})"
        result = await run_agent(
            RunSpec(task=task, idempotency_key=order.order_id), key=order.order_id
        )
        return Review(checked, result.run_id, result.status.value, result.answer)
