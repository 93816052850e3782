"""Our engine under test: an instant tool, a scripted model and run specs for the benchmark.

The model asks for N calls of the instant tool in one turn, then answers with a summary, so
a run is: model step, N tool steps (each with its mirror flush), model step, verify, receipt.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority

from agentledger.core import fairness, search_attributes
from agentledger.core._state import RunInput
from agentledger.core.spec import RiskLevel, RunSpec
from agentledger.dev.offline_model import Reply, completion
from agentledger.tools import Tool, ToolContext, ToolRegistry

NOOP_TOOL = "bench_noop"
GATED_TOOL = "bench_gated"
# The long-run workload (bench/long_run.py): one tool call per model turn, each result 4 KB,
# so every model call sees the conversation grown by one page.
PAGE_TOOL = "bench_page"
PAGE_CHARS = 4096
STEPS_RE = re.compile(r"bench: (\d+) steps")
LONG_RE = re.compile(r"bench long: (\d+) pages")
ANSWER = "## Summary\nThe benchmark steps ran."


class NoArgs(BaseModel):
    n: int = 0


async def instant(args: NoArgs, ctx: ToolContext) -> dict[str, int]:
    return {"n": args.n}


def page_text(n: int) -> str:
    """Page `n`: PAGE_CHARS printable characters, different for every page."""
    line = f"page {n:04d}: the quick brown fox jumps over the lazy dog. "
    return (line * (PAGE_CHARS // len(line) + 1))[:PAGE_CHARS]


async def page(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"n": args.n, "text": page_text(args.n)}


def bench_registry() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool(NOOP_TOOL, "Does nothing, at once.", NoArgs, instant),  # type: ignore[arg-type]
            Tool(
                GATED_TOOL,
                "Does nothing, at once, after a human approves it.",
                NoArgs,
                instant,  # type: ignore[arg-type]
                risk=RiskLevel.HIGH,
            ),
            Tool(PAGE_TOOL, "Reads page n: 4 KB of text.", NoArgs, page),  # type: ignore[arg-type]
        ]
    )


def responder(request: dict[str, Any]) -> Reply:
    """The scripted model: N instant tool calls (or one gated call) in one turn, then answer.

    N comes from the task ("bench: N steps"); a task naming the gated tool asks for it once.
    The answer depends only on how many assistant turns the request holds, so a retried call
    gets the same reply. A long task ("bench long: N pages") asks for one page per turn.
    """
    messages: list[dict[str, Any]] = request.get("messages", [])
    task = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    if pages := LONG_RE.search(task):
        read = sum(1 for m in messages if m.get("role") == "tool")
        if read >= int(pages.group(1)):
            return completion(request, content=ANSWER)
        return completion(request, tool_calls=[(PAGE_TOOL, {"n": read})])
    if any(m.get("role") == "assistant" for m in messages):
        return completion(request, content=ANSWER)
    if GATED_TOOL in task:
        return completion(request, tool_calls=[(GATED_TOOL, {"n": 0})])
    found = STEPS_RE.search(task)
    steps = int(found.group(1)) if found else 1
    return completion(request, tool_calls=[(NOOP_TOOL, {"n": i}) for i in range(steps)])


def bench_task(steps: int) -> str:
    """The task that makes the scripted model ask for `steps` instant tool calls."""
    return f"bench: {steps} steps"


def long_task(pages: int) -> str:
    """The task that makes the scripted model read `pages` pages, one per turn."""
    return f"bench long: {pages} pages"


def long_run_spec(pages: int, *, key: str, history_events_limit: int = 10_000) -> RunSpec:
    """The long-run workload for ours: a model turn per page, as the run continues as new."""
    return RunSpec(
        task=long_task(pages),
        idempotency_key=key,
        allowed_tools=[PAGE_TOOL],
        approval={"require_at_or_above": "high"},
        max_steps=pages + 5,
        history_events_limit=history_events_limit,
        timeouts={"initial_retry_seconds": 0.2},
    )


def run_spec(
    steps: int,
    *,
    key: str | None = None,
    heartbeat_seconds: float = 30,
    remote_tools: bool = False,
) -> RunSpec:
    """A run of `steps` instant tool steps that needs no approval, its read-only, low-risk
    tool run as the engine chooses for a new run (a local activity); `remote_tools`: as an
    activity of its own (`local_read_only_tools: false`)."""
    return RunSpec(
        local_read_only_tools=False if remote_tools else None,
        task=bench_task(steps),
        idempotency_key=key or f"bench-{uuid.uuid4().hex[:12]}",
        allowed_tools=[NOOP_TOOL],
        approval={"require_at_or_above": "high"},
        max_steps=5,
        timeouts={"heartbeat_seconds": heartbeat_seconds, "initial_retry_seconds": 0.2},
    )


async def start_run(
    client: Client, spec: RunInput, workflow_id: str, task_queue: str, *, fair: bool = False
) -> WorkflowHandle[Any, Any]:
    """Start a run as `starter.py run` does, with the Web UI's search attributes; `fair`: at
    its tenant's fairness key, as the door starts it (a tenant's rate applies to that key)."""
    from agentledger.workflows import AgentRunWorkflow

    return await client.start_workflow(
        AgentRunWorkflow.run,
        spec,
        id=workflow_id,
        task_queue=task_queue,
        search_attributes=search_attributes.for_run(
            spec.agent, spec.tenant, search_attributes.RUNNING, spec.priority
        ),
        priority=fairness.run_priority(spec.priority, spec.tenant) if fair else Priority(),
    )


def gated_spec(*, key: str | None = None) -> RunSpec:
    """A run whose one tool call is HIGH risk: it waits for a human's approval."""
    return RunSpec(
        task=f"bench: call {GATED_TOOL} once",
        idempotency_key=key or f"bench-gate-{uuid.uuid4().hex[:12]}",
        allowed_tools=[GATED_TOOL],
        approval={"require_at_or_above": "high"},
        max_steps=5,
        timeouts={"initial_retry_seconds": 0.2},
    )
