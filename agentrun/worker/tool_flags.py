"""The flags that name a worker's tools, shared by `agentrun-worker` and `agentrun up`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded when the flags are read, not when `agentrun --help` builds them
    from agentrun.core.settings import Settings


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    """The tools a worker serves: `agentrun-worker` and `agentrun up` take the same flags."""
    p.add_argument(
        "--tools",
        action="append",
        metavar="PKG.MODULE:ATTR",
        help="tools to serve: a ToolRegistry, a tool or a list of tools (repeatable; default "
        "AGENTRUN_TOOLS, comma-separated)",
    )
    p.add_argument(
        "--mcp",
        action="append",
        metavar="NAME=COMMAND ARGS...",
        help="an MCP server whose tools the model sees as NAME__TOOL: NAME=COMMAND ARGS... "
        "(stdio) or NAME=https://... (repeatable; default AGENTRUN_MCP, ';'-separated)",
    )


def tool_sources(args: argparse.Namespace, settings: Settings) -> tuple[list[Any], list[Any]]:
    """The flags' tools and MCP servers, else the settings' (AGENTRUN_TOOLS, AGENTRUN_MCP)."""
    from agentrun.tools.loading import split_references
    from agentrun.tools.mcp import parse_servers

    return args.tools or split_references(settings.tools), args.mcp or parse_servers(settings.mcp)
