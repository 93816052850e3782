"""A model's proposed tool call, checked against the worker's registry.

`model.complete` checks each call its reply proposes; `fork.seed` checks the calls of a
recorded reply that a fork makes again. Both hand the workflow the same clean verdict.
"""

from __future__ import annotations

from agentrun.core._wire import ProposedToolCall
from agentrun.tools import ToolRegistry
from agentrun.tools.registry import MalformedCall, UnknownToolError


def proposed_call(
    registry: ToolRegistry,
    call_id: str,
    name: str,
    raw_arguments: str,
    allowed: list[str] | None,
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
        parameters=tool.parameters,
    )
