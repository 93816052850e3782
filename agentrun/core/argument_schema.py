"""Arguments against a tool's JSON schema, as the tool would check them: an approver's edit is
refused when the call could not run with it, before the run takes it."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

JsonDict = dict[str, Any]
MAX_PROBLEMS = 5


def argument_problems(schema: JsonDict, arguments: JsonDict) -> list[str]:
    """What is wrong with `arguments`, one line each (empty when they fit, or when the schema
    itself cannot be applied: an MCP server's unknown type or unresolvable `$ref` says nothing
    about the arguments, and the tool still checks them when it runs)."""
    try:
        found = [
            f"{'.'.join(str(p) for p in error.absolute_path) or 'arguments'}: {error.message}"
            for error in Draft202012Validator(schema).iter_errors(arguments)
        ]
    except Exception:  # raised in workflow code, it would fail the run's task, not the edit
        return []
    return found[:MAX_PROBLEMS]
