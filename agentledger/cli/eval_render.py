"""An eval's report: text for a terminal, and one self-contained HTML page with an SVG chart."""

from __future__ import annotations

import html
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


def chart(report: EvalReport) -> str:
    """Tokens per case, baseline beside candidate, as an inline SVG."""
    cases = report.cases
    most = max(
        [1]
        + [c.baseline.tokens for c in cases]
        + [c.candidate.tokens for c in cases if c.candidate]
    )
    width, bar, gap = 40 + 34 * len(cases), 14, 6
    bars = []
    for i, case in enumerate(cases):
        x = 30 + i * 34
        for j, (tokens, colour) in enumerate(
            (
                (case.baseline.tokens, "#8aa"),
                (case.candidate.tokens if case.candidate else 0, "#36c"),
            )
        ):
            h = int(120 * tokens / most)
            bars.append(
                f'<rect x="{x + j * bar}" y="{140 - h}" width="{bar - 2}" height="{h}" '
                f'fill="{colour}"><title>{html.escape(case.name)}: {tokens} tokens</title></rect>'
            )
        mark = "#c33" if not case.passed else "#3a3"
        bars.append(f'<circle cx="{x + bar}" cy="152" r="4" fill="{mark}"/>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{170 + gap}" '
        f'role="img" aria-label="tokens per case, baseline and candidate">'
        + "".join(bars)
        + "</svg>"
    )


def page(report: EvalReport) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(c.name)}</td><td>{_verdict(c)}</td><td>{e(c.baseline.outcome)}</td>"
        f"<td>{e(c.candidate.outcome) if c.candidate else '-'}</td>"
        f"<td>{c.baseline.tokens}</td><td>{c.candidate.tokens if c.candidate else '-'}</td>"
        f"<td>{e(_failed_checks(c))}</td>"
        f"<td>{e(c.divergence.describe()) if c.divergence else e(c.error or '')}</td></tr>"
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
<th>baseline tokens</th><th>candidate tokens</th><th>failed checks</th><th>divergence</th></tr>
{rows}</table></body></html>
"""


def write_html(report: EvalReport, path: str) -> None:
    Path(path).write_text(page(report))
