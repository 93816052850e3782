"""Deterministic keys: what binds a retried tool call, and an approval, to one action.

Pure functions of their inputs, so workflow code derives the same key on every replay.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from agentledger.core.spec import JsonDict


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def idempotency_key(run_id: str, step_id: str, tool: str, arguments: JsonDict) -> str:
    """The key runs started before `effect_key` used: a new step, a new key."""
    digest = hashlib.sha256(canonical_json([run_id, step_id, tool, arguments]).encode())
    return f"{tool}:{digest.hexdigest()[:32]}"


def effect_key(scope: str, tool: str, arguments: JsonDict, occurrence: int) -> str:
    """What identifies an effect: whose work it is (`scope`: the run's idempotency key, the
    same for every attempt of a backlog task), the call's content, and how many identical
    calls this run already made with a known outcome. So a call proposed again after an
    unknown outcome, or by the next attempt of a backlog task, finds the same ledger row."""
    digest = hashlib.sha256(canonical_json([scope, tool, arguments, occurrence]).encode())
    return f"{tool}:{digest.hexdigest()[:32]}"


def effect_content(tool: str, arguments: JsonDict) -> str:
    """What `effect_key` counts identical calls by: the tool and its arguments, hashed (a
    fork carries its parent's effects this way, not their arguments)."""
    return hashlib.sha256(canonical_json([tool, arguments]).encode()).hexdigest()[:32]


def action_hash(tool: str, arguments: JsonDict) -> str:
    """What an approval is bound to: this tool with exactly these arguments."""
    return hashlib.sha256(canonical_json([tool, arguments]).encode()).hexdigest()[:16]


def id_part(key: str, *, dots: bool = True) -> str:
    """A person's key as it may stand in a workflow id: readable, and distinct keys stay
    distinct ("a/b" and "a-b" differ by a hash suffix). Backlog keys keep no dots, which
    separate the parts of their runs' ids; run keys always kept theirs, so ids stay as they
    were."""
    safe = re.sub(r"[^A-Za-z0-9._-]" if dots else r"[^A-Za-z0-9_-]", "-", key)
    if safe != key:
        safe += "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return safe
