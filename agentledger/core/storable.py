"""Values Postgres can store, whatever a model, a tool or a person wrote.

Postgres refuses the NUL character in `text` and in `jsonb` (`UntranslatableCharacter`):
no retry makes such a write succeed, so one `\\u0000` in a task, a model's output or a
tool's argument used to wedge a run's mirror for good. Every pooled connection writes
strings through `escape_nul` (agentledger.store.db registers it), which spells a NUL out as
the six characters `\\u0000`; `agentledger.client.projection` applies the same function to
what history holds, so the mirror and its projection still agree.
"""

from __future__ import annotations

import json
from typing import Any

NUL = "\x00"
NUL_SPELLED_OUT = "\\u0000"


def escape_nul(value: Any) -> Any:
    """`value` with every NUL in its strings (dict keys included) spelled out, at any depth."""
    if isinstance(value, str):
        return value.replace(NUL, NUL_SPELLED_OUT) if NUL in value else value
    if isinstance(value, dict):
        return {escape_nul(k): escape_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_nul(item) for item in value]
    return value


def json_dumps(value: Any) -> str:
    """JSON text Postgres accepts as `jsonb`: a NUL becomes the text `\\u0000`."""
    text = json.dumps(value)
    if "\\u0000" not in text:  # the common case costs one scan
        return text
    return json.dumps(escape_nul(value))
