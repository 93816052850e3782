"""An MCP server, written with the official SDK: the worker starts it over stdio and offers its
tools to the model as `orders__lookup_order`. Read-only, so the run calls it at once."""

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

ORDERS = {42: {"order_id": 42, "customer": "ana@example.com", "total_cents": 1999}}

server = MCPServer("orders")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup_order(order_id: int) -> dict:
    """Look an order up by its number."""
    return ORDERS.get(order_id, {"order_id": order_id, "error": "no such order"})


if __name__ == "__main__":
    server.run()
