"""The flags that name a worker's tools, shared by `agentledger-worker` and `agentledger up`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded when the flags are read, not when `agentledger --help` builds them
    from agentledger.core.config import AgentLedgerConfig


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    """The tools a worker serves: `agentledger-worker` and `agentledger up` take the same flags."""
    p.add_argument(
        "--tools",
        action="append",
        metavar="PKG.MODULE:ATTR",
        help="tools to serve: a ToolRegistry, a tool or a list of tools (repeatable; default "
        "AGENTLEDGER_TOOLS, comma-separated)",
    )
    p.add_argument(
        "--mcp",
        action="append",
        metavar="NAME=COMMAND ARGS...",
        help="an MCP server whose tools the model sees as NAME__TOOL: NAME=COMMAND ARGS... "
        "(stdio) or NAME=https://... (repeatable; default AGENTLEDGER_MCP, ';'-separated)",
    )
    p.add_argument(
        "--sandbox",
        metavar="IMAGE",
        help="also serve run_code: the model's Python in a container of this Docker image "
        "(built with `agentledger sandbox build`; default AGENTLEDGER_SANDBOX)",
    )
    p.add_argument(
        "--sandbox-limits",
        metavar="NAME=VALUE,...",
        help="run_code's limits: seconds, memory_mb, cpus, pids, output_bytes, scratch_mb, "
        "input_bytes (default AGENTLEDGER_SANDBOX_LIMITS)",
    )


def tool_sources(
    args: argparse.Namespace, settings: AgentLedgerConfig, identity: str | None = None
) -> tuple[list[Any], list[Any]]:
    """The flags' tools and MCP servers, else the settings' (AGENTLEDGER_TOOLS, AGENTLEDGER_MCP),
    and run_code when a sandbox image is named (--sandbox, AGENTLEDGER_SANDBOX)."""
    from agentledger.tools.mcp_servers import parse_servers

    tools = args.tools or list(settings.tools)
    mcp = args.mcp or parse_servers(settings.mcp)
    image = getattr(args, "sandbox", None) or settings.sandbox
    if image:
        from agentledger.core.sandbox_limits import SandboxLimits
        from agentledger.tools.sandbox import sandbox_tools

        limits = SandboxLimits.parse(
            getattr(args, "sandbox_limits", None) or settings.sandbox_limits
        )
        tools = [*tools, sandbox_tools(image, limits, identity=identity)]
    return tools, mcp
