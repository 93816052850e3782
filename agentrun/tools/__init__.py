"""Tools an agent may call: the registry, `@tool`, and loading tools from modules and MCP
servers. The demo's tools live in `agentrun.demo`, written against the public API."""

from agentrun.tools.registry import (
    Reconciled,
    Tool,
    ToolContext,
    ToolError,
    ToolForbidden,
    ToolRegistry,
)

__all__ = ["Reconciled", "Tool", "ToolContext", "ToolError", "ToolForbidden", "ToolRegistry"]
