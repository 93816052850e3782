"""JSON Merge Patch (RFC 7396): how an approver's edit changes a tool call's arguments.

A patch names only what changes: a member set to `null` is removed, an object merges into
an object member by member, anything else replaces the member whole. `between` is the
inverse: the smallest patch that turns one object into another, which a receipt keeps as
the edit's diff. Pure, so the run workflow applies it inside its sandbox.
"""

from __future__ import annotations

from typing import Any

JsonDict = dict[str, Any]


def apply(target: Any, patch: Any) -> Any:
    """`target` with `patch` merged into it (RFC 7396, section 2); neither is changed."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = apply(merged.get(name), value)
    return merged


def between(before: JsonDict, after: JsonDict) -> JsonDict:
    """The merge patch that turns `before` into `after`: removed members as `null`, changed
    ones as their new value (an object changed inside, as a patch of its own). A receipt
    keeps it as the edit's diff. (A member whose new value is `null` reads as removed: a
    merge patch cannot say "set to null".)"""
    patch: JsonDict = {}
    for name in before:
        if name not in after:
            patch[name] = None
    for name, value in after.items():
        if name in before and before[name] == value:
            continue
        old = before.get(name)
        patch[name] = (
            between(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return patch
