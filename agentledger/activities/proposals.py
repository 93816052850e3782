"""A model's proposed tool call, checked against the worker's registry.

`model.complete` checks each call its reply proposes; `fork.seed` checks the calls of a
recorded reply that a fork makes again. Both hand the workflow the same clean verdict.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agentledger.core.constants import SUBAGENT_TOOL_PREFIX
from agentledger.core.spec import JsonDict, RiskLevel
from agentledger.core.wire import ProposedToolCall
from agentledger.tools import ToolRegistry
from agentledger.tools.registry import MalformedCall, UnknownToolError


def proposed_call(
    registry: ToolRegistry,
    call_id: str,
    name: str,
    raw_arguments: str,
    allowed: list[str] | None,
    needs_schema: Callable[[str, RiskLevel], bool] = lambda tool, risk: True,
) -> ProposedToolCall:
    try:
        arguments, error = registry.check_call(name, raw_arguments, allowed)
    except UnknownToolError as err:
        return ProposedToolCall(
            call_id=call_id, tool=name, error=str(err), error_kind="unknown_tool"
        )
    except MalformedCall as err:
        return ProposedToolCall(call_id=call_id, tool=name, error=str(err), error_kind="malformed")
    tool = registry.get(name)
    return ProposedToolCall(
        call_id=call_id,
        tool=name,
        arguments=arguments,
        error=error,
        error_kind="invalid_arguments" if error else None,
        risk=tool.risk,
        side_effect=tool.side_effect,
        local=tool.local,
        # Only a call that waits for an approver needs its schema (to check an edit).
        parameters=tool.parameters if needs_schema(name, tool.risk) else None,
        summary=tool.summarize(arguments) if arguments is not None and not error else None,
    )


def subagent_schema(name: str) -> JsonDict:
    """The tool a sub-agent is to the model: a task for it, in words."""
    return {
        "type": "function",
        "function": {
            "name": SUBAGENT_TOOL_PREFIX + name,
            "description": f"Delegate a task to the {name} agent; returns its answer.",
            "parameters": {
                "type": "object",
                "properties": {"task": {"type": "string", "description": "what it should do"}},
                "required": ["task"],
                "additionalProperties": False,
            },
        },
    }


def proposed_subagent_call(call_id: str, name: str, raw_arguments: str) -> ProposedToolCall:
    """A call of a sub-agent's tool: its task, checked as a tool's arguments are."""
    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as err:
        return ProposedToolCall(
            call_id=call_id,
            tool=name,
            error=f"arguments are not JSON: {err}",
            error_kind="malformed",
        )
    task = arguments.get("task") if isinstance(arguments, dict) else None
    if not isinstance(task, str) or not task.strip():
        return ProposedToolCall(
            call_id=call_id,
            tool=name,
            arguments=arguments if isinstance(arguments, dict) else None,
            error='give the sub-agent a task: {"task": "..."}',
            error_kind="invalid_arguments",
        )
    return ProposedToolCall(call_id=call_id, tool=name, arguments={"task": task})
