"""Turning runs and receipts into text a person reads at a terminal."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agentledger.core.advice import start_a_worker
from agentledger.core.constants import FREE_FORM_AGENT
from agentledger.core.events import EventType
from agentledger.core.results import RunState, WatchItem
from agentledger.core.spec import JsonDict
from agentledger.core.states import is_terminal

if TYPE_CHECKING:
    from agentledger.types import PruneResult, RunReport, Stats

# Control characters other than newline and tab: printed raw, an ESC sequence in a task or a
# model's answer would drive the reader's terminal (clear it, retitle it, hide lines).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_terminal(text: str) -> str:
    """`text` with each control character shown as its escape (`\\x1b`), not obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def local_time(value: object) -> str:
    """A moment as a person reads it: this machine's time zone, to the second, with the zone
    named (`--json` keeps ISO 8601 in UTC). Anything else as it is."""
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(moment, datetime) and moment.tzinfo is not None:
        return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return str(value)


def table(rows: list[JsonDict], columns: list[str]) -> str:
    cells = [
        [
            ""
            if row.get(c) is None
            else local_time(row[c])
            if c.endswith("_at")
            else str(row.get(c, ""))
            for c in columns
        ]
        for row in rows
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def run_state(state: RunState) -> str:
    lines = [
        f"run {state.run_id}: {state.status.value}"
        # An ended run keeps the flag of a pause it never reached: it means nothing now.
        + (" (pause requested)" if state.pause_requested and not is_terminal(state.status) else ""),
        f"task: {state.task}",
        f"agent: {state.agent}",
        f"tenant: {state.tenant}, priority {state.priority or '-'}"
        + (
            f"; queued at position {state.queue_position} for a slot of its tenant's cap"
            if state.queue_position is not None
            else ""
        ),
        f"tokens: {state.tokens_in} in / {state.tokens_out} out, cost ${state.cost_usd:.6f}",
    ]
    if state.pause_reason:
        lines.append(f"paused for an admin: {state.pause_reason}")
        lines.append(f"  fix it, then: agentledger resume {state.run_id}")
    if state.pending_approval:
        p = state.pending_approval
        lines += [
            f"waiting for approval ({p.kind}) {p.approval_id}: {p.tool}({p.arguments})",
            *([f"  why: {p.reason}"] if p.reason else []),
            f"  needs role {p.required_role!r}; action {p.action_hash}; "
            f"expires {local_time(p.expires_at)}",
            f"  approve: agentledger approve {state.run_id} --by NAME --role {p.required_role}",
        ]
    for refusal in state.refusals:
        lines.append(f"refused decision by {refusal.by} at {refusal.at}: {refusal.reason}")
    if state.children:
        lines.append(f"sub-agent runs: {', '.join(state.children)}")
    for c in state.child_approvals:
        p = c.approval
        lines += [
            f"sub-agent run {c.run_id} waits for approval ({p.kind}) {p.approval_id}: {p.tool}",
            f"  approve: agentledger approve {c.run_id} --by NAME --role {p.required_role}",
        ]
    for m in state.messages:
        lines.append(
            f"message {m.message_id[:8]} from {m.by} at {local_time(m.received_at)}: {m.text[:200]}"
        )
        lines.append("  " + message_fate(m.model_dump(mode="json")))
    if state.turns:  # a session
        last = state.turns[-1]
        lines.append(f"session: {last.turn} turns")
        if state.status.value == "waiting_for_message":
            lines.append(f"waiting for a message: agentledger chat {state.run_id}")
            lines.append(f"  turn {last.turn} answered: {(last.answer or '')[:200]}")
    if state.error:
        lines.append(f"error: {state.error}")
    lines.append("")
    lines.append(
        table([s.model_dump() for s in state.steps], ["step_id", "type", "name", "status"])
    )
    return "\n".join(lines)


def run_report(report: RunReport) -> str:
    """`status`: the state, then where it came from and who serves the run."""
    lines = [run_state(report.state), ""]
    if report.workflow_task_failure:
        lines.append(f"stuck: {report.workflow_task_failure}")
    if report.source == "mirror":
        lines.append("(no worker answered: this is the run as the Postgres mirror last saw it)")
    if report.waiting_since is not None:
        lines.append(
            f"queued: waiting for a worker on queue {report.task_queue} since "
            f"{report.waiting_since:%Y-%m-%d %H:%M:%S} UTC (no worker has taken it yet)"
        )
    if report.no_progress_seconds is not None:
        lines.append(
            f"last progress: {local_time(report.last_progress_at)} "
            f"({report.no_progress_seconds:.0f}s ago)"
        )
    for a in report.in_flight:
        line = f"in flight: {a.activity}, attempt {a.attempt}, {a.state}"
        line += f" since {a.since:%H:%M:%S}" if a.since else ""
        line += f" on {a.worker}" if a.worker else ""
        if a.last_failure:
            line += f"; last failure: {a.last_failure}"
        if a.next_attempt_at:
            line += f"; next try at {a.next_attempt_at:%H:%M:%S}"
        lines.append(line)
    workers = ", ".join(
        f"{w.identity} ({w.seconds_ago:.0f}s ago)" if w.seconds_ago is not None else w.identity
        for w in report.workers
    )
    lines.append(
        f"workers polling {report.task_queue}: {workers}"
        if workers
        else f"no worker polls {report.task_queue}: {start_a_worker(report.task_queue)}"
    )
    return "\n".join(lines)


def receipt_markdown(receipt: dict[str, Any]) -> str:
    r = receipt
    out = [
        f"# Receipt for {r['run_id']}",
        "",
        f"- **Outcome:** {r['outcome']}" + (f" ({r['error']})" if r.get("error") else ""),
        f"- **Agent:** {r.get('agent', FREE_FORM_AGENT)}"
        + (f" (profile {r['profile_hash']})" if r.get("profile_hash") else ""),
        f"- **Task:** {r['task']}",
        f"- **Tenant / user:** {r['tenant']} / {r['user']}",
        f"- **Tokens:** {r['tokens_in']} in, {r['tokens_out']} out; **cost:** " + receipt_cost(r),
        f"- **Duplicates prevented:** {r['duplicates_prevented']}",
        f"- **Paid for but unused:** {r.get('unaccepted_tokens', 0)} tokens, "
        f"${r.get('unaccepted_cost_usd', 0):.6f}",
        f"- **Started / finished:** {r['started_at']} / {r['finished_at']}",
    ]
    origin = r.get("forked_from")
    if origin:
        out.append(
            f"- **Forked from:** {origin['parent_run_id']} at step {origin['from_step']}"
            + (" with an edited output" if origin.get("edit_output") is not None else "")
            + " (steps before it taken as recorded, not run again)"
        )
    if r.get("forks"):
        out.append(f"- **Forks:** {', '.join(r['forks'])}")
    out += ["", "## Side effects"]
    out += [
        f"- {e['tool']} `{e['idempotency_key']}`: {'ok' if e['ok'] else 'failed'}"
        + (" (duplicate prevented)" if e["duplicate_prevented"] else "")
        + (f" (reconciled: {e['reconciliation']})" if e.get("reconciliation") else "")
        for e in r["side_effects"]
    ] or ["- none"]
    out += ["", "## Approvals"]
    out += [
        f"- {a.get('kind', 'action')} {a['tool']}: {a['decision']} by {a.get('by') or '-'} "
        f"({a.get('role') or '-'})"
        + (f", edited {a['edit']}" if a.get("edit") else "")
        + (f", reason: {a['reason']}" if a.get("reason") else "")
        for a in r["approvals"]
    ] or ["- none"]
    if r.get("messages"):
        out += ["", "## Messages"]
        out += [
            f"- from {m['by']} at {m['received_at']}: {m['text']}\n  ({message_fate(m)})"
            for m in r["messages"]
        ]
    for t in r.get("turns") or []:  # a session's (spec `session`): a section per turn
        steps = f"steps {t['first_step']}-{t['last_step'] or '…'}"
        out += [
            "",
            f"## Turn {t['turn']}",
            "",
            f"- **Asked:** {t.get('asked') or '-'}",
            f"- **Took:** {steps}, {t['model_calls']} model calls, {t['tokens']} tokens, "
            f"${t['cost_usd']:.6f}",
            f"- **Answered:** {t.get('answered_at') or 'not yet'}",
            "",
            t.get("answer") or "(no answer)",
        ]
    if r.get("turns"):
        out += ["", f"Summaries of older turns: {r.get('summaries', 0)}"]
        left = r.get("left_in_mirror") or {}
        if left.get("turns"):
            out += [
                f"Turns 1-{left['turns']}, {left.get('messages', 0)} messages and "
                f"{left.get('steps', 0)} steps are not repeated here: "
                f"the mirror has them (`agentledger watch {r['run_id']}` replays their events)"
            ]
    out += ["", "## Retries"]
    out += [f"- {x['step_id']}: {x['attempts']} attempts; {x['reason']}" for x in r["retries"]] or [
        "- none"
    ]
    out += ["", "## Verification"]
    verification = r.get("verification")
    out += [
        f"- {'pass' if c['passed'] else 'FAIL'}: {c['name']}"
        for c in (verification or {}).get("checks", [])
    ] or ["- not run"]
    out += ["", "## Unresolved"] + ([f"- {u}" for u in r["unresolved"]] or ["- nothing"])
    out += ["", "## Steps"] + [
        f"{s['seq']}. {s['type']} {s['name']}: {s['status']}" for s in r["steps"]
    ]
    if r.get("answer"):
        out += ["", "## Answer", "", r["answer"]]
    return "\n".join(out)


def receipt_line(receipt: dict[str, Any]) -> str:
    """The receipt in one line: how the run ended, what it did, who approved, what it cost."""
    r = receipt
    effects = [e["tool"] for e in r["side_effects"]]
    checks = (r.get("verification") or {}).get("checks", [])
    parts = [
        f"{r['outcome']}" + (f" ({r['error']})" if r.get("error") else ""),
        f"{len(r['steps'])} steps",
        f"{len(effects)} side effect(s)" + (f" ({', '.join(effects)})" if effects else ""),
        *(f"{a['tool']} {a['decision']} by {a.get('by') or '-'}" for a in r["approvals"]),
        f"{sum(c['passed'] for c in checks)}/{len(checks)} checks passed",
        f"{r['tokens_in'] + r['tokens_out']:,} tokens",
        receipt_cost(r),
    ]
    return " · ".join(parts)


def message_fate(message: dict[str, Any]) -> str:
    """When the run took a message said to it (`agentledger say`), and what it interrupted."""
    if message.get("taken_at") is None:
        return "not taken: the run has not called its model since"
    fate = f"taken at {message['taken_at']}, before step {message['taken_before_step']}"
    if message.get("interrupted_step"):
        fate += f"; interrupted model call {message['interrupted_step']}"
    return fate


def receipt_cost(receipt: dict[str, Any]) -> str:
    """The run's cost; what no price is known for is said to be unknown, never $0."""
    unpriced = receipt.get("unpriced_models") or []
    if not unpriced:
        return f"${receipt['cost_usd']:.6f}"
    unknown = f"unknown for {', '.join(unpriced)} (no price: set AGENTLEDGER_MODEL_PRICES)"
    if not receipt["cost_usd"]:
        return unknown
    return f"${receipt['cost_usd']:.6f} for priced models + {unknown}"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def stats_text(s: Stats) -> str:
    """The fleet figures, cost first, then outcomes, then where time and work went."""
    window = f"runs started since {local_time(s.since)}" if s.since else "all runs"
    lines = [
        f"agentledger stats: {window}",
        "",
        f"COST PER COMPLETED RUN  {_usd(s.cost_per_completed_run_usd)}"
        f"  ({_usd(s.finished_cost_usd)} spent on {s.runs_finished} finished runs"
        f" / {s.runs_completed} completed)",
        f"  a completed run's own cost, on average: {_usd(s.completed_run_cost_avg_usd)};"
        f" all spend, live runs included: {_usd(s.cost_total_usd)}",
    ]
    if s.unpriced_model_calls:
        lines.append(
            f"  not counted: {s.unpriced_model_calls} model calls of models with no known price"
            f" ({', '.join(s.unpriced_models)}): their cost is unknown"
        )
    lines.append("")
    figures = [
        (
            "runs",
            f"{s.runs_started} started: {s.runs_completed} completed, {s.runs_failed} failed, "
            f"{s.runs_cancelled} cancelled, {s.runs_live} not finished",
        ),
        ("completion rate", f"{_percent(s.completion_rate)} (completed / finished)"),
        ("failure rate", f"{_percent(s.failure_rate)} (failed / finished: what users see)"),
        (
            "run duration",
            f"median {duration(s.duration_median_seconds)}, "
            f"p95 {duration(s.duration_p95_seconds)} (finished runs, approvals included)",
        ),
        (
            "retries",
            "-"
            if s.retries_per_run is None
            else f"{s.retries_per_run:.2f} per run ({s.retries} in all, {s.runs_retried} runs)",
        ),
        (
            "recovered runs",
            f"{s.runs_recovered} (went on after losing {s.lost_attempts} attempts "
            "with their worker)",
        ),
        ("duplicates prevented", f"{s.duplicates_prevented} (side effects not repeated)"),
        (
            "approval wait",
            f"median {duration(s.approval_wait_median_seconds)}, "
            f"p95 {duration(s.approval_wait_p95_seconds)} "
            f"({s.approvals_decided} decided, {s.approvals_expired} expired)",
        ),
    ]
    width = max(len(name) for name, _ in figures)
    lines += [f"{name.ljust(width)}  {text}" for name, text in figures]
    for title, rows in (
        ("tool failures", [t.model_dump() for t in s.tool_failures]),
        ("model failures", [m.model_dump() for m in s.model_failures]),
    ):
        key = "tool" if title.startswith("tool") else "model"
        lines += ["", f"{title} (by {key})"]
        lines.append(
            table(rows, [key, "calls", "failed_attempts", "failed_calls"]) if rows else "  none"
        )
    return "\n".join(lines)


def prune_text(result: PruneResult) -> str:
    verb = "would delete" if result.dry_run else "deleted"
    lines = [
        f"{verb} {result.runs} run{'' if result.runs == 1 else 's'}"
        + (f" of tenant {result.tenant}" if result.tenant else "")
        + " that finished before "
        f"{local_time(result.cutoff)}" + (" (dry run: nothing changed)" if result.dry_run else ""),
        table(
            [{"table": t, "rows": n} for t, n in result.deleted.items()],
            ["table", "rows"],
        ),
        "kept: tool_ledger (it stops a retried side effect from happening twice), outbox, "
        "tickets, and runs not finished",
    ]
    if result.artifacts_kept_for_newer_runs:
        lines.append(
            f"{result.artifacts_kept_for_newer_runs} artifacts kept: newer runs refer to them"
        )
    return "\n".join(lines)


def mirror_report(report: JsonDict) -> str:
    run_id = report["run_id"]
    if report["agrees"]:
        return f"run {run_id}: the mirror agrees with Temporal's history, row by row"
    counts = ", ".join(f"{n} {kind}" for kind, n in report["counts"].items() if n)
    lines = [f"run {run_id}: the mirror differs from Temporal's history ({counts})"]
    lines += [f"  {line}" for line in report["differences"]]
    if report["open"]:
        lines.append("the run is still open: its latest writes may not have landed yet")
    else:
        lines.append(f"`agentledger mirror rebuild {run_id}` rewrites it from the history")
    return "\n".join(lines)


def watch_line(item: WatchItem, run_id: str) -> str:
    """One line of `agentledger watch` for people (model text is printed as it comes); an
    approval request says how to decide it."""
    if item.kind == "receipt":
        r = item.data
        return (
            f"receipt: {r.get('outcome')}, {len(r.get('steps', []))} steps, "
            f"{_usd(r.get('cost_usd'))}; `agentledger receipt {r.get('run_id')}` shows it all"
        )
    # The clock time alone, in this machine's zone (a moment without one is UTC's): a watch
    # lasts minutes, not days.
    at = item.at and (item.at if item.at.tzinfo else item.at.replace(tzinfo=UTC))
    when = at.astimezone().strftime("%H:%M:%S") if at else "        "
    details = ", ".join(f"{k}={v}" for k, v in item.data.items() if v not in (None, "", {}, []))
    step = f" [{item.step_id}]" if item.step_id else ""
    line = f"{when} {item.type}{step}" + (f"  {details}" if details else "")
    role = item.data.get("required_role")
    if item.type == EventType.APPROVAL_REQUESTED and role:
        line += (
            f"\n         decide: agentledger approve {run_id} --by NAME --role {role}"
            f"  (or reject ... --reason ...)"
        )
    return line


def compact(value: Any, limit: int = 60) -> str:
    """One line of JSON (or text) for a table cell."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
