"""Tools an agent may call: a registry of typed callables, and a demo set."""

from agentrun.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

__all__ = ["Tool", "ToolContext", "ToolError", "ToolRegistry"]
