"""An eval's report: text for a terminal, and one self-contained HTML page with an SVG chart."""

from __future__ import annotations

import html
import json
from pathlib import Path

from agentledger.core.eval_reports import CaseScore, EvalReport


def _verdict(case: CaseScore) -> str:
    if case.error is not None:
        return "ERROR"
    if case.divergence is not None:
        return "DIVERGED"
    return "pass" if case.passed else "FAIL"


def _failed_checks(case: CaseScore) -> str:
    return ", ".join(name for name, ok in case.assertions.items() if not ok)


def differing_call(case: CaseScore) -> str | None:
    """For a failed case, the first tool call where the candidate differs from the recording
    (its tool or its arguments), or one it made or left out; None when every call matches."""
    if case.passed or case.candidate is None:
        return None
    before, after = case.baseline.calls, case.candidate.calls
    for n, (was, now) in enumerate(zip(before, after, strict=False), start=1):
        if (was.tool, was.arguments) != (now.tool, now.arguments):
            return (
                f"call {n}: recorded {was.tool}({json.dumps(was.arguments)}), "
                f"candidate {now.tool}({json.dumps(now.arguments)})"
            )
    if len(after) > len(before):
        extra = after[len(before)]
        return f"call {len(before) + 1}: candidate also {extra.tool}({json.dumps(extra.arguments)})"
    if len(before) > len(after):
        missing = before[len(after)]
        return (
            f"call {len(after) + 1}: candidate left out {missing.tool}"
            f"({json.dumps(missing.arguments)})"
        )
    return None


def text(report: EvalReport) -> str:
    from agentledger.cli import render

    rows = [
        {
            "case": case.name,
            "verdict": _verdict(case),
            "baseline": f"{case.baseline.outcome}, {len(case.baseline.calls)} call(s), "
            f"{case.baseline.tokens} tok",
            "candidate": (
                f"{case.candidate.outcome}, {len(case.candidate.calls)} call(s), "
                f"{case.candidate.tokens} tok"
                if case.candidate
                else "-"
            ),
            "failed checks": _failed_checks(case),
        }
        for case in report.cases
    ]
    t = report.totals
    lines = [
        f"eval {report.eval_id}: {report.dataset} -> candidate {report.candidate}",
        render.table(rows, ["case", "verdict", "baseline", "candidate", "failed checks"]),
    ]
    diverged = [c for c in report.cases if c.divergence is not None]
    if diverged:
        lines.append("divergences (the first call the recording lacks):")
        lines += [f"  {c.name}: {c.divergence.describe()}" for c in diverged if c.divergence]
    differing = [(c.name, d) for c in report.cases if (d := differing_call(c))]
    if differing:
        lines.append("failed cases, the first call that differs:")
        lines += [f"  {name}: {difference}" for name, difference in differing]
    lines += [f"  {c.name}: {c.error}" for c in report.cases if c.error]
    lines.append(
        f"{t.passed}/{t.cases} passed ({t.pass_rate:.0%}), {t.diverged} diverged; tokens "
        f"{t.baseline_tokens} -> {t.candidate_tokens} (x{t.token_ratio:.2f}); cost "
        f"${t.baseline_cost_usd:.4f} -> ${t.candidate_cost_usd:.4f} (x{t.cost_ratio:.2f})"
    )
    if report.gate_failures:
        lines.append("gate FAILED: " + "; ".join(report.gate_failures))
    else:
        lines.append("gate passed")
    return "\n".join(lines)


BASELINE, CANDIDATE, PASSED, FAILED = "#8aa", "#36c", "#3a3", "#c33"


def chart(report: EvalReport) -> str:
    """Tokens per case, baseline beside candidate, as an inline SVG: a tokens axis with its
    scale, the cases along the bottom (each named on hover) with its verdict as a dot, and a
    legend of the colours."""
    cases = report.cases
    most = max(
        [1]
        + [c.baseline.tokens for c in cases]
        + [c.candidate.tokens for c in cases if c.candidate]
    )
    left, bar, step = 60, 14, 34
    width = max(left + 20 + step * len(cases), 420)
    parts = [
        # The axes: tokens up the left (0 and the largest count), cases along the bottom.
        f'<line x1="{left - 6}" y1="20" x2="{left - 6}" y2="140" stroke="#333"/>',
        f'<line x1="{left - 6}" y1="140" x2="{width - 10}" y2="140" stroke="#333"/>',
        f'<text x="{left - 10}" y="24" font-size="10" text-anchor="end">{most}</text>',
        f'<text x="{left - 10}" y="140" font-size="10" text-anchor="end">0</text>',
        '<text x="12" y="80" font-size="11" transform="rotate(-90 12 80)" '
        'text-anchor="middle">tokens</text>',
        f'<text x="{(left + width) // 2}" y="172" font-size="11" text-anchor="middle">'
        "cases (dot: passed or failed)</text>",
    ]
    for i, case in enumerate(cases):
        x = left + i * step
        for j, (tokens, colour) in enumerate(
            (
                (case.baseline.tokens, BASELINE),
                (case.candidate.tokens if case.candidate else 0, CANDIDATE),
            )
        ):
            h = int(120 * tokens / most)
            parts.append(
                f'<rect x="{x + j * bar}" y="{140 - h}" width="{bar - 2}" height="{h}" '
                f'fill="{colour}"><title>{html.escape(case.name)}: {tokens} tokens</title></rect>'
            )
        mark = FAILED if not case.passed else PASSED
        parts.append(
            f'<circle cx="{x + bar}" cy="152" r="4" fill="{mark}"><title>'
            f"{html.escape(case.name)}: {'passed' if case.passed else 'failed'}</title></circle>"
        )
    legend = (
        ("baseline", BASELINE),
        ("candidate", CANDIDATE),
        ("passed", PASSED),
        ("failed", FAILED),
    )
    for k, (name, colour) in enumerate(legend):
        y = 196
        x = left + k * 95
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{x + 14}" y="{y}" font-size="11">{name}</text>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="206" '
        f'role="img" aria-label="tokens per case, baseline and candidate">'
        + "".join(parts)
        + "</svg>"
    )


def page(report: EvalReport) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c.name)}</td><td>{_verdict(c)}</td><td>{e(c.baseline.outcome)}</td>"
        f"<td>{e(c.candidate.outcome) if c.candidate else '-'}</td>"
        f"<td>{c.baseline.tokens}</td><td>{c.candidate.tokens if c.candidate else '-'}</td>"
        f"<td>{e(_failed_checks(c))}</td>"
        f"<td>{e(c.divergence.describe()) if c.divergence else e(c.error or '')}"
        f"{e(differing_call(c) or '')}</td></tr>"
        for c in report.cases
    )
    gate = (
        "gate FAILED: " + "; ".join(report.gate_failures) if report.gate_failures else "gate passed"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>eval {e(report.eval_id)}</title>
<style>body{{font-family:sans-serif}}td,th{{border:1px solid #ccc;padding:2px 6px}}</style></head>
<body><h1>{e(report.dataset)} &rarr; {e(report.candidate)}</h1>
<p>{report.totals.passed}/{report.totals.cases} passed, {report.totals.diverged} diverged;
cost ${report.totals.baseline_cost_usd:.4f} &rarr; ${report.totals.candidate_cost_usd:.4f}.
<b>{e(gate)}</b></p>
{chart(report)}
<table><tr><th>case</th><th>verdict</th><th>baseline</th><th>candidate</th>
<th>baseline tokens</th><th>candidate tokens</th><th>failed checks</th>
<th>divergence, or the first call that differs</th></tr>
{rows}</table></body></html>
"""


def write_html(report: EvalReport, path: str) -> None:
    Path(path).write_text(page(report))
