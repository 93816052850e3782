"""The MCP servers a worker is told to serve, as named on its command line or in AGENTLEDGER_MCP.

Apart from the MCP client (agentledger.tools.mcp), which a worker loads only when it is
given a server.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from agentledger.core.errors import McpSetupError

# Between a server's name and its tool's in the name the model sees: `NAME__TOOL`.
SEPARATOR = "__"


@dataclass(frozen=True)
class McpServerSpec:
    """`NAME=COMMAND ARGS...` (stdio) or `NAME=http(s)://...` (streamable HTTP)."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None

    @classmethod
    def parse(cls, raw: str) -> McpServerSpec:
        name, sep, target = raw.partition("=")
        name, target = name.strip(), target.strip()
        if not sep or not name or not target:
            raise McpSetupError(f"--mcp {raw!r}: expected NAME=COMMAND ARGS... or NAME=https://...")
        if not name.replace("_", "").replace("-", "").isalnum() or SEPARATOR in name:
            raise McpSetupError(
                f"--mcp {raw!r}: the name must be letters, digits, '-' or single '_'"
            )
        if target.startswith(("http://", "https://")):
            return cls(name, url=target)
        return cls(name, command=tuple(shlex.split(target)))


def parse_servers(raw: str) -> list[McpServerSpec]:
    """AGENTLEDGER_MCP: one server per line, or several separated by ';'."""
    parts = [p.strip() for line in raw.splitlines() for p in line.split(";")]
    return [McpServerSpec.parse(p) for p in parts if p]
