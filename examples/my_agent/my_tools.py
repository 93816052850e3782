"""Your own tools: plain async functions with a pydantic model for their arguments.

`refund` changes money, so it is high risk (a person approves each call) and has a side
effect (the idempotency ledger makes sure it happens once). It writes through `ctx.conn`,
inside the ledger's transaction: the refund and its record commit together.
"""

from pydantic import BaseModel, Field

from agentledger import ToolContext, ToolRegistry, tool

# The table this tool writes; every worker that has the tool creates it when it starts.
REFUNDS = """
CREATE TABLE IF NOT EXISTS refunds (
    idempotency_key text PRIMARY KEY,
    run_id text NOT NULL,
    order_id int NOT NULL,
    cents int NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


class Refund(BaseModel):
    order_id: int = Field(description="the order to refund")
    cents: int = Field(gt=0, le=100_000, description="how much, in cents")


@tool(risk="high", side_effect=True, schema=[REFUNDS])
async def refund(args: Refund, ctx: ToolContext) -> dict[str, object]:
    """Refund part or all of an order to the customer's card."""
    await ctx.conn.execute(
        "INSERT INTO refunds (idempotency_key, run_id, order_id, cents) VALUES (%s, %s, %s, %s)",
        (ctx.idempotency_key, ctx.run_id, args.order_id, args.cents),
    )
    return {"refunded_cents": args.cents, "order_id": args.order_id}


registry = ToolRegistry([refund])
