"""The most any one field of people's input may hold: one table, checked by the client and again
in the run.

Input enters through a start, a decision, a control (pause, resume, cancel), a backlog
enqueue, a tenant command and an approver command. Unbounded, a 300 kB `by` on a decision
is refused but recorded on the run, and a few of them later fail the run on the size of its
mirror write. So every string and list there has a maximum. The client operations check
them before anything is sent (`InputTooLarge`, which the command line reports with exit 2,
naming the field and the limit); the run checks them again in its update validators, since
anyone with a Temporal client can send what they like, and records a refused signal once,
cut to `RECORDED_CHARS`.

The models' own `max_length`s stay as they were: a model the workflow decodes must not start
to refuse what a run already in flight carries (a run's task would fail for ever). The table
here is applied by `problems`, which walks a model's fields.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from agentledger.core.errors import InvalidRequest

# Characters of text, items of a list or mapping, or bytes of free JSON, by field name (the
# last part of its path). Fields not named take the defaults below.
NAME_CHARS = 200  # who and what: people, roles, tenants, agents, keys, tools, models
TASK_CHARS = 20_000  # a task, an agent's instructions (agentledger.core.spec.MAX_TASK_CHARS)
REASON_CHARS = 2_000  # a rejection's or a pause's reason, a rubric line, a check's pattern
LIST_ITEMS = 100  # tools allowed, approvers, signers, roles, checks
JSON_BYTES = 64_000  # an edit, an edited fork output, a verify JSON schema
TASKS_PER_ENQUEUE = 1_000  # agentledger.core.backlog_models.MAX_TASKS_PER_ENQUEUE

LIMITS: dict[str, int] = {
    "task": TASK_CHARS,
    "instructions": TASK_CHARS,
    "rubric": 4_000,
    "reason": REASON_CHARS,
    "text": TASK_CHARS,  # a message said to a run (`agentledger say`)
    "subagents": 256_000,  # sub-agents' spec fields, as JSON
    "pattern": REASON_CHARS,
    "required_sections": LIST_ITEMS,
    "forbidden": LIST_ITEMS,
    "action_hash": 64,
    "profile_hash": 64,
    "public_key": 200,
    "signature": 200,
    "tasks": TASKS_PER_ENQUEUE,
    "run_id": 500,  # "run-" and a key of 200 characters, escaped (agentledger.core.keys.id_part)
    "parent_run_id": 500,
    "when": 500,  # an approval rule's condition (agentledger.core.policy_rules)
}
DEFAULT_TEXT_CHARS = NAME_CHARS
# Text items of a list, where they may be longer than a name.
ITEM_CHARS = {"required_sections": REASON_CHARS, "forbidden": REASON_CHARS}
DEFAULT_ITEMS = LIST_ITEMS
# Values that are any JSON (a tool's arguments, an output, a schema): measured as JSON.
FREE_JSON = frozenset({"edit", "replace", "edit_output", "json_schema", "subagents"})
# Engine-made, not people's input: a continuation's carried state, the run's generation, and
# identities and policies read from credentials and Postgres (their models bound them).
ENGINE_FIELDS = frozenset(
    {
        "carry",
        "workflow_generation",
        "admission",
        "effect_scope",
        "subagent_depth",
        "requester",
        "decider",
        "tenant_policy",
    }
)
# How much of a refused value a run records (`by` in a refusal event, say).
RECORDED_CHARS = 200
# How much of a long text (a message, a turn's question or answer) a run's state and its
# `state` query keep; the mirror has it whole.
EXCERPT_CHARS = 2000


class InputTooLarge(InvalidRequest):
    """A field over its maximum: refused before anything is sent (exit 2)."""


def limit_for(path: str) -> int:
    name = path.rsplit(".", 1)[-1].split("[", 1)[0]
    return LIMITS.get(name, JSON_BYTES if name in FREE_JSON else DEFAULT_TEXT_CHARS)


def problems(value: BaseModel, path: str = "") -> list[str]:
    """Every field of `value` (and of the models in it) over its maximum, one line each."""
    found: list[str] = []
    for name in type(value).model_fields:
        if name in ENGINE_FIELDS:
            continue
        found += _check(f"{path}{name}", name, getattr(value, name))
    return found


def check(value: BaseModel, what: str = "") -> None:
    """Raise `InputTooLarge` naming each field over its maximum."""
    found = problems(value)
    if found:
        raise InputTooLarge(f"{what or 'input'} refused: {'; '.join(found[:5])}")


def check_text(field: str, text: str | None, limit: int | None = None) -> None:
    """One text a command takes outside a model (a tenant's name, an approver's)."""
    most = limit or limit_for(field)
    if text is not None and len(text) > most:
        raise InputTooLarge(f"{field}: {len(text):,} characters, over the limit of {most:,}")


def excerpt(text: str | None) -> str | None:
    """What a run's state keeps of a long text: its start, and how long it was."""
    if text is None or len(text) <= EXCERPT_CHARS:
        return text
    return text[:EXCERPT_CHARS] + f"... ({len(text):,} characters)"


def recorded(text: str | None) -> str | None:
    """What a run keeps of a value it refused: its start, and how long it was."""
    if text is None or len(text) <= RECORDED_CHARS:
        return text
    return f"{text[:RECORDED_CHARS]}… ({len(text):,} characters)"


def _check(path: str, name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if name in FREE_JSON:
        size = len(json.dumps(value, default=str).encode())
        most = limit_for(name)
        return (
            [f"{path}: {size:,} bytes of JSON, over the limit of {most:,}"] if size > most else []
        )
    if isinstance(value, BaseModel):
        return problems(value, f"{path}.")
    if isinstance(value, str):
        return _text(path, value, limit_for(name))
    if isinstance(value, list | tuple | dict):
        most = LIMITS.get(name, DEFAULT_ITEMS)
        if len(value) > most:
            return [f"{path}: {len(value):,} items, over the limit of {most:,}"]
        items = value.items() if isinstance(value, dict) else enumerate(value)
        found: list[str] = []
        for key, item in items:
            if isinstance(key, str):
                found += _text(f"{path} key", key, DEFAULT_TEXT_CHARS)
            if isinstance(item, BaseModel):
                found += problems(item, f"{path}[{key!r}].")
            elif isinstance(item, str):
                found += _text(f"{path}[{key!r}]", item, ITEM_CHARS.get(name, DEFAULT_TEXT_CHARS))
        return found
    return []


def _text(path: str, text: str, most: int) -> list[str]:
    if len(text) <= most:
        return []
    return [f"{path}: {len(text):,} characters, over the limit of {most:,}"]
