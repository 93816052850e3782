"""How a tool call reads to the person asked to approve it: a tool's summary template over
the call's arguments, an MCP tool's title, and no summary rather than a wrong one."""

from __future__ import annotations

import mcp_types
import pytest

from agentledger import tool
from agentledger.core.action_summary import summarize
from agentledger.demo.tools import refund_order
from agentledger.tools.mcp import McpConnection
from agentledger.tools.mcp_servers import McpServerSpec


def test_a_refund_reads_in_dollars() -> None:
    assert refund_order.summarize({"cents": 1999, "order_id": 42}) == "Refund $19.99 on order 42"
    assert summarize("{cents:money}", {"cents": 123456789}) == "$1,234,567.89"
    assert summarize("{cents:money}", {"cents": -5}) == "-$0.05"


def test_a_template_that_does_not_fit_the_call_gives_no_summary() -> None:
    assert refund_order.summarize({"order_id": 42}) is None  # cents missing
    assert summarize("{cents:money}", {"cents": "lots"}) is None
    assert summarize("{cents:money}", {"cents": True}) is None
    # Only arguments by name: nothing reaches into what the model sent.
    assert summarize("{order.__class__}", {"order": {}}) is None
    long = summarize("Note: {text}", {"text": "x" * 1000})
    assert long is not None and len(long) == 300 and long.endswith("…")


def test_a_tool_declares_a_readable_template() -> None:
    with pytest.raises(ValueError, match="not an argument's name"):

        @tool(summary="Refund {args[0]}")
        async def bad(args: object, ctx: object) -> None:
            """A tool."""


def test_an_mcp_tool_reads_as_its_title_and_arguments() -> None:
    connection = McpConnection(McpServerSpec(name="shop", command=["true"]))
    listed = mcp_types.Tool(
        name="refund",
        title="Refund an order",
        input_schema={"type": "object", "properties": {"order": {"type": "integer"}}},
    )
    [found] = connection.tools([listed])
    assert found.summarize({"order": 42}) == "Refund an order: order 42"
    untitled = connection.tools([listed.model_copy(update={"title": None})])[0]
    assert untitled.summarize({"order": 42}) is None
