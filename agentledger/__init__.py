"""agentledger: durable runs for AI agents on Temporal, mirrored to Postgres.

What a user writes against, and nothing more (README "Your agent in five minutes"):

- `tool`, `ToolContext`, `ToolError`, `ToolForbidden`, `Reconciled`: declare a tool, use what a
  call may use, fail a call the model should hear about (or one it lacks permission for: the
  run pauses for an admin), answer a reconcile hook.
- `ToolRegistry`: a named set of tools, one thing `agentledger-worker --tools` can load.
- `Agent`: a profile (instructions, model, tools, policies) that expands into a `RunSpec`.
- `RunSpec`: everything a person sets for one run; a field only the engine sets is refused.
- `run_worker`: a worker with your tools and MCP servers, in your own process;
  `worker_command_line`: a worker process's edge from `agentledger-worker`'s command line,
  for a deployment's own worker.py (its Client and Worker, with your own workflows and
  activities beside the engine's).
- `AgentLedgerPlugin` and `AgentLedgerConfig`: agentledger on your own Temporal Client and Worker,
  configured by one typed object.
- `RunClient`: the one front door from Python: every operation the `agentledger` command has.
- `AgentLedgerError` and its public subclasses `InvalidInput`, `NotFound`, `Unreachable` and
  `Refused`: what agentledger raises for people, each with the command's exit code.
- `agentledger.types`: the types RunClient's methods take and return (`Started`, `RunState`,
  ...) and the parts of a `RunSpec` (`VerifySpec`, `ApprovalPolicy`, ...).

Everything else is private and may change. Names load on first use, so importing a
submodule (as workflow code does) never pulls in the worker or the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentledger.client.run_client import RunClient
    from agentledger.core.config import AgentLedgerConfig
    from agentledger.core.errors import (
        AgentLedgerError,
        InvalidInput,
        NotFound,
        Refused,
        Unreachable,
    )
    from agentledger.core.spec import RunSpec
    from agentledger.profiles import Agent
    from agentledger.tools.decorator import tool
    from agentledger.tools.registry import (
        Reconciled,
        ToolContext,
        ToolError,
        ToolForbidden,
        ToolRegistry,
    )
    from agentledger.worker.main import worker_command_line
    from agentledger.worker.plugin import AgentLedgerPlugin
    from agentledger.worker.worker_api import run_worker

_HOMES = {
    "tool": "agentledger.tools.decorator",
    "ToolContext": "agentledger.tools.registry",
    "ToolError": "agentledger.tools.registry",
    "ToolForbidden": "agentledger.tools.registry",
    "Reconciled": "agentledger.tools.registry",
    "ToolRegistry": "agentledger.tools.registry",
    "RunSpec": "agentledger.core.spec",
    "Agent": "agentledger.profiles",
    "RunClient": "agentledger.client.run_client",
    "run_worker": "agentledger.worker.worker_api",
    "worker_command_line": "agentledger.worker.main",
    "AgentLedgerPlugin": "agentledger.worker.plugin",
    "AgentLedgerConfig": "agentledger.core.config",
    # Errors: each public class carries the `agentledger` command's exit code for it.
    "AgentLedgerError": "agentledger.core.errors",
    "InvalidInput": "agentledger.core.errors",
    "NotFound": "agentledger.core.errors",
    "Unreachable": "agentledger.core.errors",
    "Refused": "agentledger.core.errors",
}

__all__ = [
    "Agent",
    "AgentLedgerConfig",
    "AgentLedgerError",
    "AgentLedgerPlugin",
    "InvalidInput",
    "NotFound",
    "Reconciled",
    "Refused",
    "RunClient",
    "RunSpec",
    "ToolContext",
    "ToolError",
    "ToolForbidden",
    "ToolRegistry",
    "Unreachable",
    "run_worker",
    "tool",
    "worker_command_line",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'agentledger' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
