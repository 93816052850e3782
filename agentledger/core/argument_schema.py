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


def unknown_fields(schema: JsonDict, edit: JsonDict) -> list[str]:
    """The fields an edit names that the tool does not have: an edit may only change what
    the tool takes. JSON schema lets an object carry fields it does not list unless told
    otherwise (pydantic's schemas and most MCP servers' do not say), and a tool ignores
    what it does not know, so the approved call would run as proposed while the receipt
    said it was edited. Only a schema that opens itself (`additionalProperties` true or a
    schema) takes fields it does not list."""
    properties = schema.get("properties")
    extra = schema.get("additionalProperties", False)
    if not isinstance(properties, dict) or extra is True or isinstance(extra, dict):
        return []
    return [
        f"{name}: the tool has no such field (it takes {', '.join(sorted(properties)) or 'none'})"
        for name in edit
        if name not in properties
    ][:MAX_PROBLEMS]
