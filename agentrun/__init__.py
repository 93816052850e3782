"""agentrun: durable runs for AI agents on Temporal, mirrored to Postgres.

What a user writes against, and nothing more (README "Your agent in five minutes"):

- `tool`, `ToolContext`, `ToolError`, `ToolForbidden`, `Reconciled`: declare a tool, use what a
  call may use, fail a call the model should hear about (or one it lacks permission for: the
  run pauses for an admin), answer a reconcile hook.
- `ToolRegistry`: a named set of tools, one thing `agentrun-worker --tools` can load.
- `Agent`: a profile (instructions, model, tools, policies) that expands into a `RunSpec`.
- `RunSpec`: everything a person sets for one run; a field only the engine sets is refused.
- `run_worker`: a worker with your tools and MCP servers, in your own process;
  `worker_command`: the same as `agentrun-worker`'s command line, with your own workflows
  and activities beside the engine's (a deployment's worker.py).
- `AgentrunPlugin` and `AgentrunConfig`: agentrun on your own Temporal Client and Worker
  (docs/temporal-app.md).
- `RunClient`: the one front door from Python: every operation the `agentrun` command has.
- `AgentrunError` and its public subclasses `InvalidInput`, `NotFound`, `Unreachable` and
  `Refused`: what agentrun raises for people, each with the command's exit code.
- `agentrun.types`: the types RunClient's methods take and return (`Settings`, `Started`,
  `RunState`, ...) and the parts of a `RunSpec` (`VerifySpec`, `ApprovalPolicy`, ...).

Everything else is private and may change. Names load on first use, so importing a
submodule (as workflow code does) never pulls in the worker or the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrun.client_api import RunClient
    from agentrun.core.errors import AgentrunError, InvalidInput, NotFound, Refused, Unreachable
    from agentrun.core.plugin_config import AgentrunConfig
    from agentrun.core.spec import RunSpec
    from agentrun.profiles import Agent
    from agentrun.tools.decorator import tool
    from agentrun.tools.registry import (
        Reconciled,
        ToolContext,
        ToolError,
        ToolForbidden,
        ToolRegistry,
    )
    from agentrun.worker.main import worker_command
    from agentrun.worker.plugin import AgentrunPlugin
    from agentrun.worker.worker_api import run_worker

_HOMES = {
    "tool": "agentrun.tools.decorator",
    "ToolContext": "agentrun.tools.registry",
    "ToolError": "agentrun.tools.registry",
    "ToolForbidden": "agentrun.tools.registry",
    "Reconciled": "agentrun.tools.registry",
    "ToolRegistry": "agentrun.tools.registry",
    "RunSpec": "agentrun.core.spec",
    "Agent": "agentrun.profiles",
    "RunClient": "agentrun.client_api",
    "run_worker": "agentrun.worker.worker_api",
    "worker_command": "agentrun.worker.main",
    "AgentrunPlugin": "agentrun.worker.plugin",
    "AgentrunConfig": "agentrun.core.plugin_config",
    # Errors: each public class carries the `agentrun` command's exit code for it.
    "AgentrunError": "agentrun.core.errors",
    "InvalidInput": "agentrun.core.errors",
    "NotFound": "agentrun.core.errors",
    "Unreachable": "agentrun.core.errors",
    "Refused": "agentrun.core.errors",
}

__all__ = [
    "Agent",
    "AgentrunConfig",
    "AgentrunError",
    "AgentrunPlugin",
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
    "worker_command",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'agentrun' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
