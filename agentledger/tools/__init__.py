"""Tools an agent may call: the registry, `@tool`, and loading tools from modules and MCP
servers. The demo's tools live in `agentledger.demo`, written against the public API."""

from agentledger.tools.registry import (
    Reconciled,
    Tool,
    ToolContext,
    ToolError,
    ToolForbidden,
    ToolRegistry,
)

__all__ = ["Reconciled", "Tool", "ToolContext", "ToolError", "ToolForbidden", "ToolRegistry"]
