"""What an eval replays to a candidate, and how a candidate's tool call finds its answer (pure).

A case's recording is what a past run did: its task, each tool call with its arguments and
result in order, the approvals it asked and their decisions, its answer and verification.
A candidate's call is answered by the first recorded call not yet used with the same tool and
the same normalized arguments, so identical calls are taken in turn; a call the recording
lacks is a divergence, kept with what the recording did at that point instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentledger.core.constants import EVAL_ID_PREFIX, FREE_FORM_AGENT
from agentledger.core.keys import id_part
from agentledger.core.spec import JsonDict, RunSpec

# An eval case's run is started with an idempotency key under this prefix: the tool activity
# looks for a recording only for such runs, so no other run pays a lookup per tool call.
EVAL_KEY_PREFIX = "evalcase."


class RecordedCall(BaseModel):
    seq: int = Field(description="its step number in the recorded run")
    tool: str
    arguments: JsonDict = Field(default_factory=dict)
    ok: bool = True
    output: Any = None
    error: str | None = None


class RecordedApproval(BaseModel):
    tool: str
    arguments: JsonDict = Field(default_factory=dict)
    decision: Literal["approved", "rejected", "expired"]
    reason: str | None = None


class Recording(BaseModel):
    """A past run as a case replays it: a pydantic-evals case's metadata."""

    run_id: str
    agent: str = FREE_FORM_AGENT
    outcome: str
    calls: list[RecordedCall] = Field(default_factory=list)
    approvals: list[RecordedApproval] = Field(default_factory=list)
    answer: str | None = None
    verification_passed: bool | None = None
    tokens: int = 0
    cost_usd: float = 0.0


class EvalInputs(BaseModel):
    """A case's inputs: what the candidate is asked."""

    task: str


class ToolUse(BaseModel):
    tool: str
    arguments: JsonDict = Field(default_factory=dict)


class Divergence(BaseModel):
    """The first call of a candidate's run the recording does not have."""

    step: int = Field(description="the candidate's step number")
    index: int = Field(description="how many tool calls the candidate made before it")
    call: ToolUse
    recorded: RecordedCall | None = Field(
        description="what the recording did instead: its next unused call (None: no more)"
    )
    stopped: bool = Field(True, description="False: a read-only tool ran live past it")

    def describe(self) -> str:
        instead = (
            f"the recording called {self.recorded.tool} {canonical(self.recorded.arguments)} "
            f"(its step {self.recorded.seq})"
            if self.recorded is not None
            else "the recording made no more tool calls"
        )
        return f"step {self.step}: {self.call.tool} {canonical(self.call.arguments)}; {instead}"


def canonical(arguments: Any) -> str:
    """Arguments as one comparable text: keys sorted, strings stripped of outer whitespace."""
    return json.dumps(_normalized(arguments), sort_keys=True, separators=(",", ":"))


def _normalized(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(v) for v in value]
    if isinstance(value, str):
        return value.strip()
    return value


def match(
    calls: list[RecordedCall], used: Collection[int], tool: str, arguments: JsonDict
) -> int | None:
    """The index of the recorded call that answers this one, if the recording has it."""
    wanted = canonical(arguments)
    for index, call in enumerate(calls):
        if index not in used and call.tool == tool and canonical(call.arguments) == wanted:
            return index
    return None


def next_unused(calls: list[RecordedCall], used: Collection[int]) -> RecordedCall | None:
    return next((c for i, c in enumerate(calls) if i not in used), None)


def eval_id(dataset: str, candidate_hash: str) -> str:
    """The same dataset and candidate always name the same eval, so a re-run resumes it."""
    return hashlib.sha256(f"{dataset}\0{candidate_hash}".encode()).hexdigest()[:12]


def case_key(eval_id: str, case_name: str) -> str:
    """The idempotency key of a case's run: a re-run finds the run, and pays for nothing."""
    return f"{EVAL_KEY_PREFIX}{eval_id}.{case_name}"


def eval_workflow_id(tenant: str, eval_id: str) -> str:
    """The eval's workflow: one per tenant and eval, so a re-run of the command finds it."""
    return f"{EVAL_ID_PREFIX}{id_part(tenant)}~{eval_id}"


class EvalCaseTask(BaseModel):
    name: str
    task: str


class EvalWorkflowInput(BaseModel):
    """What the eval workflow still has to run: the cases not yet started by its earlier runs
    (it continues as new between batches), each the candidate's run of the case's task."""

    eval_id: str
    candidate: RunSpec = Field(description="every case's run, but its task")
    cases: list[EvalCaseTask]
    concurrency: int = Field(4, ge=1, description="case runs at once, at most")
    batch: int = Field(200, ge=1, description="cases a run starts before it continues as new")
    total: int = Field(description="the eval's cases, all runs of the workflow together")
    done: int = Field(0, description="cases ended in its earlier runs")


class EvalProgress(BaseModel):
    done: int
    total: int
    running: list[str] = Field(default_factory=list, description="cases whose runs are working")


def is_eval_run(run_id: str) -> bool:
    return EVAL_KEY_PREFIX in run_id
