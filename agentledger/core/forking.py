"""Where a fork starts, worked out from a run's recorded steps and conversation (pure).

A fork at step N takes steps 1..N-1 as the parent recorded them and the conversation they
built: every message up to the model reply that proposed step N's call, and the tool
results of that reply's calls before it. Step N then runs live, or, at a tool step with an
edited output, the edit stands for its result. Model steps map to the assistant messages in
order (a completed model step appended exactly one). A tool step maps to the call (and so
the call id) that proposed what it ran, or what its approval was asked: a call the parent
refused, or a person rejected, has no tool step, so counting calls by name would land on
the wrong one. When the record cannot tell which call it was, the fork is refused.

The effects the parent made before the fork point are listed (`inherited_effects`): the
fork counts them as its own when it keys an effect, and keys them in the parent's scope, so
a call the parent already made with the same content finds the parent's ledger row and
does not happen again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentledger.core.errors import ForkError
from agentledger.core.keys import effect_content
from agentledger.core.results import ForkOrigin
from agentledger.core.spec import JsonDict
from agentledger.core.wire import StepRecord

FORKABLE = ("model_call", "tool_call")


@dataclass
class ForkPlan:
    seeded: list[StepRecord]  # steps 1..N-1, as recorded
    prefix: list[JsonDict]  # the conversation the fork starts with
    model_calls: int  # model calls among the seeded steps
    calls: list[JsonDict]  # step N's reply's calls from step N on (tool forks); [] otherwise
    target: StepRecord

    @property
    def inherited_effects(self) -> list[str]:
        """The content of each effect the parent made before the fork point (the fork keys
        its own calls counting them, as the parent did)."""
        return [
            effect_content(s.name, s.input)
            for s in self.seeded
            if s.type == "tool_call" and s.idempotency_key and s.status == "completed"
        ]


def plan(origin: ForkOrigin, steps: list[StepRecord], conversation: list[JsonDict]) -> ForkPlan:
    parent, n = origin.parent_run_id, origin.from_step
    by_seq = {s.seq: s for s in steps}
    target = by_seq.get(n)
    if target is None:
        raise ForkError(f"run {parent} has no step {n}: `agentledger receipt {parent}` lists them")
    if target.type not in FORKABLE:
        raise ForkError(
            f"step {n} of {parent} is a {target.type} step; fork at a model or tool step"
        )
    if origin.edit_output is not None and target.type != "tool_call":
        raise ForkError("--edit-output replaces a tool's output: fork at a tool step")
    seeded = [s for s in steps if s.seq < n]
    unfinished = [s.step_id for s in seeded if not s.final]
    if unfinished or not target.final:
        raise ForkError(
            f"steps up to {n} of {parent} are not all recorded as finished "
            f"({', '.join(unfinished) or target.step_id}); fork once they are"
        )
    answered = [
        s
        for s in seeded
        if s.type == "model_call" and s.status == "completed" and not is_summary(s)
    ]
    replies = [i for i, m in enumerate(conversation) if m.get("role") == "assistant"]
    if target.type == "model_call":
        k = len(answered)
        prefix = conversation[: replies[k]] if k < len(replies) else conversation
        return ForkPlan(seeded, prefix, len(answered), [], target)
    if not answered:
        raise ForkError(f"step {n} of {parent} has no model reply before it")
    k = len(answered) - 1
    if k >= len(replies):
        raise ForkError(
            f"{parent}'s stored conversation stops before step {n}'s reply (the run made no "
            "model call after it): fork at the model step before it"
        )
    reply_at = replies[k]
    calls: list[JsonDict] = list(conversation[reply_at].get("tool_calls") or [])
    j = _call_of(target, calls, [s for s in seeded if s.seq > answered[-1].seq])
    if j is None:
        raise ForkError(
            f"step {n}'s call is not among its reply's tool calls, or {parent}'s record does "
            f"not say which of them it is: fork at the model step before it "
            f"(step {answered[-1].seq})"
        )
    results = conversation[reply_at + 1 : reply_at + 1 + j]
    if len(results) < j or any(m.get("role") != "tool" for m in results):
        raise ForkError(f"{parent}'s conversation lacks the results of the calls before step {n}")
    return ForkPlan(seeded, conversation[: reply_at + 1 + j], len(answered), calls[j:], target)


def is_summary(step: StepRecord) -> bool:
    """A session's summary call (agentledger.workflows.sessions): a model step that added no
    reply to the conversation."""
    return isinstance(step.output, dict) and "summarised_turns" in step.output


def _call_of(target: StepRecord, calls: list[JsonDict], before: list[StepRecord]) -> int | None:
    """Which of the reply's calls the tool step made (None when the record cannot tell).

    `before`: the steps between the reply and the target. The call proposed what the
    target's approval (the step just before it) was asked about, or what the target ran;
    identical calls are taken in turn."""
    proposed = target.input
    prior = before[-1] if before else None
    if (
        prior is not None
        and prior.type == "approval"
        and prior.name == target.name
        and prior.status == "approved"
        and prior.input.get("kind") == "action"
        and isinstance(prior.input.get("arguments"), dict)
    ):
        proposed = prior.input["arguments"]
    named = [i for i, c in enumerate(calls) if _name(c) == target.name]
    same = [i for i in named if _arguments(calls[i]) == proposed] or [
        i for i in named if _within(_arguments(calls[i]), proposed)
    ]
    if not same:
        return named[0] if len(named) == 1 else None
    earlier = sum(
        1
        for s in before
        if s.type == "tool_call"
        and s.name == target.name
        and s.input == target.input
        and s.status != "unknown_outcome"
    )
    return same[earlier] if earlier < len(same) else None


def _arguments(call: JsonDict) -> Any:
    try:
        return json.loads(str((call.get("function") or {}).get("arguments") or "{}"))
    except ValueError:
        return None


def _within(raw: Any, proposed: JsonDict) -> bool:
    """The model's arguments, as the tool's checks completed them (defaults filled in)."""
    return isinstance(raw, dict) and all(proposed.get(k) == v for k, v in raw.items())


def _name(call: Any) -> str:
    return str((call.get("function") or {}).get("name", ""))
