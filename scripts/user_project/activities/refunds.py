"""A high-risk tool with a side effect and its own table: a person approves each call, and
the ledger makes it happen once."""

from pydantic import BaseModel, Field

import agentledger

REFUNDS = """
CREATE TABLE IF NOT EXISTS user_refunds (
    idempotency_key text PRIMARY KEY,
    run_id text NOT NULL,
    order_id int NOT NULL,
    cents int NOT NULL
)
"""


class Refund(BaseModel):
    order_id: int = Field(description="the order to refund")
    cents: int = Field(gt=0, le=100_000, description="how much, in cents")


@agentledger.tool(risk="high", side_effect=True, schema=[REFUNDS])
async def refund(args: Refund, ctx: agentledger.ToolContext) -> dict[str, int]:
    """Refund part or all of an order."""
    await ctx.conn.execute(
        "INSERT INTO user_refunds (idempotency_key, run_id, order_id, cents) "
        "VALUES (%s, %s, %s, %s)",
        (ctx.idempotency_key, ctx.run_id, args.order_id, args.cents),
    )
    return {"refunded_cents": args.cents, "order_id": args.order_id}


registry = agentledger.ToolRegistry([refund])
