"""Load a worker's tools from `PKG.MODULE:ATTR` references (`agentledger-worker --tools`,
AGENTLEDGER_TOOLS).

ATTR is a `ToolRegistry`, a `Tool` or a list of tools. Every problem (an import error, a bad
attribute, a name two sources both use) is one `ToolLoadError` line, before the worker polls.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from agentledger.core.errors import ToolLoadError
from agentledger.tools.registry import Tool, ToolRegistry

# The demo's tools: what `agentledger-worker --demo`, `agentledger demo` and a bare `agentledger
# up` serve.
DEMO_TOOLS = "agentledger.demo:registry"


def resolve(reference: str) -> Any:
    """The object a `PKG.MODULE:ATTR` reference names (ATTR may be dotted)."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ToolLoadError(f"{reference!r}: expected PKG.MODULE:ATTR, e.g. my_tools:registry")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:
        raise ToolLoadError(
            f"{reference!r}: cannot import {module_name!r} ({type(err).__name__}: {err}); "
            "is its folder on PYTHONPATH?"
        ) from err
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolLoadError(f"{reference!r}: {module_name} has no attribute {attr!r}") from None
    return target


def tools_of(reference: str, target: Any) -> list[Tool]:
    if isinstance(target, ToolRegistry):
        return target.tools()
    if isinstance(target, Tool):
        return [target]
    if isinstance(target, list | tuple) and all(isinstance(t, Tool) for t in target):
        return list(target)
    raise ToolLoadError(
        f"{reference!r} is a {type(target).__name__}, not a ToolRegistry, a tool or a list of "
        "tools (declare tools with @agentledger.tool)"
    )


def load_registry(
    sources: Iterable[Any], more: Iterable[tuple[str, list[Tool]]] = ()
) -> ToolRegistry:
    """One registry from every source (a `PKG.MODULE:ATTR` reference, or the registry, tool
    or list it would name) and from `more` (labelled tool lists, e.g. an MCP server's); no two
    tools may share a name."""
    registry = ToolRegistry()
    origin: dict[str, str] = {}
    loaded = [
        (s, tools_of(s, resolve(s))) if isinstance(s, str) else (repr(s), tools_of(repr(s), s))
        for s in sources
    ]
    for reference, tools in [*loaded, *more]:
        for tool in tools:
            if tool.name in origin:
                raise ToolLoadError(
                    f"tool {tool.name!r} comes from both {origin[tool.name]} and {reference}; "
                    "rename one of them"
                )
            origin[tool.name] = reference
            registry.register(tool)
    return registry


def split_references(raw: str) -> list[str]:
    """AGENTLEDGER_TOOLS: comma-separated references."""
    return [part.strip() for part in raw.split(",") if part.strip()]
