"""The shop's own activity."""

from dataclasses import dataclass

from temporalio import activity


@dataclass
class Order:
    order_id: str
    customer: str
    amount_usd: float


@activity.defn
async def check_order(order: Order) -> str:
    return f"order {order.order_id}: {order.amount_usd:.2f} USD for {order.customer}"
