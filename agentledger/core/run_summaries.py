"""What the Temporal Web UI shows a person about a run, in words (pure, no I/O).

The run's static summary and details (set at start), its current details (what it waits
for, the exact command that decides it, where its receipt is once it ends) and a one-line
summary for every activity, so the timeline reads `tool send_message to ana@example.com`
instead of `tool.invoke`. Mirror writes say they are bookkeeping.
"""

from __future__ import annotations

from agentledger.core._state import RunInput, RunProgress
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.states import TERMINAL, RunStatus
from agentledger.core.wire import MirrorBatch

# The Web UI cuts summaries near here; keep the start readable.
SUMMARY_CHARS = 120


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def static_summary(spec: RunSpec) -> str:
    return _cut(f"agent {spec.agent} · tenant {spec.tenant} · {spec.task}", SUMMARY_CHARS)


def static_details(spec: RunInput, run_id: str) -> str:
    lines = [
        f"**Task:** {_cut(spec.task, 2000)}",
        f"**Agent:** {spec.agent} · **tenant:** {spec.tenant} · **user:** {spec.user}",
        f"**Follow it:** `agentledger watch {run_id}`",
    ]
    if spec.fork is not None:
        lines.append(
            f"**Forked from:** {spec.fork.parent_run_id} at step {spec.fork.from_step}"
            + (" (with an edited output)" if spec.fork.edit_output is not None else "")
        )
    return "\n\n".join(lines)


def _argument_hint(arguments: JsonDict) -> str:
    for name in ("to", "recipient", "query", "url", "title", "path"):
        value = arguments.get(name)
        if isinstance(value, str) and value:
            return f"to {value}" if name in ("to", "recipient") else f'"{_cut(value, 48)}"'
    return ""


def tool_summary(tool: str, arguments: JsonDict) -> str:
    hint = _argument_hint(arguments)
    return _cut(f"tool {tool} {hint}".strip(), SUMMARY_CHARS)


def model_summary(model: str, tokens_so_far: int) -> str:
    return f"model {model}, {tokens_so_far:,} tokens so far"


def mirror_summary(batch: MirrorBatch) -> str:
    return (
        f"mirror write (bookkeeping): run {batch.run.status.value}, "
        f"{len(batch.steps)} step rows, {len(batch.events)} events"
    )


def current_details(run_id: str, progress: RunProgress) -> str:
    """Markdown for the Web UI's *Current details*: what the run does or waits for now, and
    once it has ended, what its receipt says in one line and where to read it."""
    status, step_id, error = progress.status, progress.current_step_id, progress.error
    pending, pause_reason = progress.pending_approval, progress.pause_reason
    if pending is not None:
        args = _argument_hint(pending.arguments)
        what = f"{pending.tool} {args}".strip() if pending.kind == "action" else pending.kind
        lines = [
            f"**Waiting for approval** of {what} (role `{pending.required_role}`, "
            f"expires {pending.expires_at:%Y-%m-%d %H:%M} UTC)."
        ]
        if pending.reason:
            lines.append(f"Why: {_cut(pending.reason, 300)}")
        lines += [
            f"Approve: `agentledger approve {run_id} --by YOUR_NAME "
            f"--role {pending.required_role}`",
            f"Reject: `agentledger reject {run_id} --by YOUR_NAME "
            f'--role {pending.required_role} --reason "..."`',
        ]
        return "\n\n".join(lines)
    if status == RunStatus.WAITING_FOR_MESSAGE:
        turns = len(progress.turns)
        return (
            f"**Waiting for a message** (turn {turns} answered): "
            f'`agentledger chat {run_id}`, or `agentledger say {run_id} "..."`'
        )
    if status == RunStatus.PAUSED:
        return (
            f"**Paused**{': ' + pause_reason if pause_reason else ''}. "
            f"Resume: `agentledger resume {run_id}`"
        )
    if status in TERMINAL:
        outcome = f"**{status.value.capitalize()}**" + (f": {_cut(error, 300)}" if error else "")
        effects = len(progress.side_effects)
        return (
            f"{outcome}\n\n{len(progress.steps)} steps · {effects} side effect"
            f"{'' if effects == 1 else 's'} · {progress.duplicates_prevented} duplicates "
            f"prevented · {progress.tokens_in + progress.tokens_out:,} tokens · "
            f"${progress.cost_usd:.6f}\n\n"
            f"Receipt: `agentledger receipt {run_id}` "
            f"(Postgres: `SELECT receipt FROM receipts WHERE run_id = '{run_id}'`)"
        )
    doing = f" at step {step_id}" if step_id else ""
    return f"**{status.value.replace('_', ' ').capitalize()}**{doing}."
