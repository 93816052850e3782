"""Options every command of the CLI shares, so each means the same everywhere."""

from __future__ import annotations

import argparse
from typing import Any

from agentrun.core.settings import Settings
from agentrun.temporal.worker_presence import DEFAULT_WAIT_SECONDS
from agentrun.tools.loading import split_references
from agentrun.tools.mcp import parse_servers


def add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        help=f"seconds to wait for an answer before saying why none came "
        f"(default {DEFAULT_WAIT_SECONDS:g})",
    )


def add_tenant(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", help="only this tenant's runs (default AGENTRUN_TENANT)")


def add_decider(p: argparse.ArgumentParser) -> None:
    """Who decides, how the decision is bound to what they saw, and whose run it is."""
    p.add_argument("--by", required=True, help="who decides: signs with their approver key")
    p.add_argument(
        "--role",
        help="the role, for an unsigned decision (a signed one carries its key's role)",
    )
    p.add_argument(
        "--action-hash",
        help="decide only if the pending action is still this one (from `status`)",
    )
    add_tenant(p)


def add_tool_flags(p: argparse.ArgumentParser) -> None:
    """The tools a worker serves: `worker.py` and `starter.py up` take the same flags."""
    p.add_argument(
        "--tools",
        action="append",
        metavar="PKG.MODULE:ATTR",
        help="tools to serve: a ToolRegistry, a tool or a list of tools (repeatable; default "
        "AGENTRUN_TOOLS, comma-separated; with neither this nor --mcp, the demo's tools)",
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
    return args.tools or split_references(settings.tools), args.mcp or parse_servers(settings.mcp)
