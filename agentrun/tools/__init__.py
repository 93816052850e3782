"""Tools an agent may call: a registry of typed callables, and a demo set."""

from agentrun.tools.registry import (
    Reconciled,
    Tool,
    ToolContext,
    ToolError,
    ToolForbidden,
    ToolRegistry,
)

__all__ = ["Reconciled", "Tool", "ToolContext", "ToolError", "ToolForbidden", "ToolRegistry"]
