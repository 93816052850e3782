"""Turning runs and receipts into text a person reads at a terminal."""

from __future__ import annotations

from typing import Any

from agentrun.models import JsonDict, RunState


def table(rows: list[JsonDict], columns: list[str]) -> str:
    cells = [
        [str(row.get(c, "") if row.get(c) is not None else "") for c in columns] for row in rows
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def run_state(state: RunState) -> str:
    lines = [
        f"run {state.run_id}: {state.status.value}"
        + (" (pause requested)" if state.pause_requested else ""),
        f"task: {state.task}",
        f"tokens: {state.tokens_in} in / {state.tokens_out} out, cost ${state.cost_usd:.6f}",
    ]
    if state.pending_approval:
        p = state.pending_approval
        lines += [
            f"waiting for approval {p.approval_id}: {p.tool}({p.arguments})",
            f"  needs role {p.required_role!r}; action {p.action_hash}; expires {p.expires_at}",
            f"  approve: python starter.py approve {state.run_id} --by NAME --role "
            f"{p.required_role}",
        ]
    if state.error:
        lines.append(f"error: {state.error}")
    lines.append("")
    lines.append(
        table([s.model_dump() for s in state.steps], ["step_id", "type", "name", "status"])
    )
    return "\n".join(lines)


def receipt_markdown(receipt: dict[str, Any]) -> str:
    r = receipt
    out = [
        f"# Receipt for {r['run_id']}",
        "",
        f"- **Outcome:** {r['outcome']}" + (f" ({r['error']})" if r.get("error") else ""),
        f"- **Task:** {r['task']}",
        f"- **Tenant / user:** {r['tenant']} / {r['user']}",
        f"- **Tokens:** {r['tokens_in']} in, {r['tokens_out']} out; **cost:** ${r['cost_usd']:.6f}",
        f"- **Duplicates prevented:** {r['duplicates_prevented']}",
        f"- **Started / finished:** {r['started_at']} / {r['finished_at']}",
        "",
        "## Side effects",
    ]
    out += [
        f"- {e['tool']} `{e['idempotency_key']}`: {'ok' if e['ok'] else 'failed'}"
        + (" (duplicate prevented)" if e["duplicate_prevented"] else "")
        for e in r["side_effects"]
    ] or ["- none"]
    out += ["", "## Approvals"]
    out += [
        f"- {a['tool']}: {a['decision']} by {a.get('by') or '-'} ({a.get('role') or '-'})"
        + (f", edited {a['edit']}" if a.get("edit") else "")
        + (f", reason: {a['reason']}" if a.get("reason") else "")
        for a in r["approvals"]
    ] or ["- none"]
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
