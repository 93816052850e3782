"""Turn a results dict (what run.py writes as JSON) into Markdown tables. Pure functions."""

from __future__ import annotations

from typing import Any

from bench.stats import fmt, fmt_ratio, ratio, render_table

SYSTEMS = ("ours", "bare", "pgq")


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _pair(summary: Any, a: str = "p50", b: str = "p99", unit: str = " ms") -> str:
    if not isinstance(summary, dict) or not summary.get("n"):
        return "—"
    return f"{fmt(summary.get(a))} / {fmt(summary.get(b))}{unit}"


def _ratio_of(results: dict[str, Any], *path: str) -> str:
    ours = _get(results, "overhead", "ours", *path)
    bare = _get(results, "overhead", "bare", *path)
    return fmt_ratio(ratio(ours, bare))


def summary_table(results: dict[str, Any]) -> str:
    """The headline figures: ours beside bare Temporal and the Postgres queue, with ratios."""
    o = results.get("overhead") or {}
    steps = o.get("steps", "N")
    rows: list[list[object]] = []
    for mode, label in (("isolated", "one run at a time"), ("back_to_back", "runs back to back")):
        rows.append(
            [
                f"per-step latency p50 / p99, {steps} steps, {label}",
                _pair(_get(o, "ours", mode, "step_ms")),
                _pair(_get(o, "bare", mode, "step_ms")),
                _pair(_get(o, "pgq", mode, "step_ms")),
                f"{_ratio_of(results, mode, 'step_ms', 'p50')} / "
                f"{_ratio_of(results, mode, 'step_ms', 'p99')}",
            ]
        )
    rows.append(
        [
            "run time ÷ steps, p50 (one at a time)",
            _pair(_get(o, "ours", "isolated", "wall_per_step_ms"), "p50", "p50").split(" / ")[0]
            + " ms",
            _pair(_get(o, "bare", "isolated", "wall_per_step_ms"), "p50", "p50").split(" / ")[0]
            + " ms",
            _pair(_get(o, "pgq", "isolated", "wall_per_step_ms"), "p50", "p50").split(" / ")[0]
            + " ms",
            _ratio_of(results, "isolated", "wall_per_step_ms", "p50"),
        ]
    )
    lat = results.get("latency") or {}
    rows.append(
        [
            "start → first step starts, p50 / p99",
            _pair(_get(lat, "start_to_first_step_ms", "ours")),
            _pair(_get(lat, "start_to_first_step_ms", "bare")),
            "—",
            fmt_ratio(
                ratio(
                    _get(lat, "start_to_first_step_ms", "ours", "p50"),
                    _get(lat, "start_to_first_step_ms", "bare", "p50"),
                )
            ),
        ]
    )
    rows.append(
        [
            "approval sent → handled (update returns), p50 / p99",
            _pair(lat.get("approval_update_ms")),
            "—",
            "—",
            "—",
        ]
    )
    rows.append(
        [
            "approval sent → approved step starts, p50 / p99",
            _pair(lat.get("approval_to_step_ms")),
            "—",
            "—",
            "—",
        ]
    )
    rec = results.get("recovery") or {}
    hb = rec.get("heartbeat_seconds")
    rows.append(
        [
            f"recovery: SIGKILL → step retried on another worker, p50 / p99 "
            f"({rec.get('kills', 0)} kills, heartbeat timeout {fmt(hb, ' s', 0)})",
            _pair(rec.get("seconds_kill_to_retry"), unit=" s"),
            "—",
            "—",
            "—",
        ]
    )
    effects = rec.get("side_effects_per_run") or {}
    rows.append(
        [
            "side effects per run of the recovery test (must be 1)",
            (
                f"{effects.get('min')} to {effects.get('max')} over {rec.get('runs')} runs "
                f"({rec.get('duplicates_prevented')} duplicates prevented)"
                if effects
                else "—"
            ),
            "—",
            "—",
            "—",
        ]
    )
    load = _get(results, "throughput", "mirror_lag_under_load")
    rows.append(
        [
            "mirror lag: step done in Temporal → final row in Postgres, p50 / p95",
            _pair(o.get("mirror_lag_ms"), "p50", "p95")
            + (
                f"; at {load.get('level')} concurrent: {_pair(load.get('ms'), 'p50', 'p95')}"
                if isinstance(load, dict)
                else ""
            ),
            "—",
            "—",
            "—",
        ]
    )
    return render_table(
        ["measure", "agentrun (ours)", "bare Temporal", "PG queue", "ours ÷ bare"], rows
    )


def throughput_table(results: dict[str, Any]) -> str:
    levels = _get(results, "throughput", "levels") or []
    rows: list[list[object]] = []
    for row in levels:
        ours, bare, pgq = (row.get(k) or {} for k in SYSTEMS)
        notes = [
            f"{name}: {r.get('completed')}/{r.get('started')} runs done in the time budget"
            + (f", {r['steps_done']} steps" if r.get("steps_done") else "")
            for name, r in (("ours", ours), ("bare", bare), ("pgq", pgq))
            if r.get("timed_out")
        ]
        notes += [
            f"{name}: {r['error']}"
            for name, r in (("ours", ours), ("bare", bare), ("pgq", pgq))
            if r.get("error")
        ]
        rows.append(
            [
                row["level"],
                fmt(ours.get("runs_per_second"), digits=2),
                fmt(ours.get("steps_per_second")),
                fmt(bare.get("runs_per_second"), digits=2),
                fmt(bare.get("steps_per_second")),
                fmt(pgq.get("steps_per_second")),
                fmt_ratio(ratio(ours.get("steps_per_second"), bare.get("steps_per_second"))),
                fmt(ours.get("rss_mb"), " MB", 0),
                fmt(bare.get("rss_mb"), " MB", 0),
                fmt(ours.get("worker_cpu_ms_per_step"), " ms", 1),
                fmt(bare.get("worker_cpu_ms_per_step"), " ms", 1),
                f"{fmt(ours.get('temporal_cpu_ms_per_step'), ' ms')} / "
                f"{fmt(bare.get('temporal_cpu_ms_per_step'), ' ms')}",
                "; ".join(notes) or "",
            ]
        )
    return render_table(
        [
            "concurrent runs",
            "ours runs/s",
            "ours steps/s",
            "bare runs/s",
            "bare steps/s",
            "PG queue steps/s",
            "ours ÷ bare steps/s",
            "ours worker RSS",
            "bare worker RSS",
            "ours worker CPU/step",
            "bare worker CPU/step",
            "Temporal server CPU/step, ours / bare",
            "note",
        ],
        rows,
    )


def targets_table(results: dict[str, Any]) -> str:
    """The issue's targets, each with the figure measured and whether it is met."""
    step = ratio(
        _get(results, "overhead", "ours", "isolated", "step_ms", "p50"),
        _get(results, "overhead", "bare", "isolated", "step_ms", "p50"),
    )
    rec = results.get("recovery") or {}
    p99 = _get(rec, "seconds_kill_to_retry", "p99")
    hb = rec.get("heartbeat_seconds")
    lag = _get(results, "overhead", "mirror_lag_ms", "p95")
    load = _get(results, "throughput", "mirror_lag_under_load") or {}
    lag_load = _get(load, "ms", "p95")

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "**not met**")

    rows = [
        [
            "per-step overhead within 1.25x of bare Temporal (p50, one run at a time)",
            fmt_ratio(step),
            verdict(None if step is None else step <= 1.25),
        ],
        [
            "recovery p99 within the heartbeat timeout + 2 s",
            f"{fmt(p99, ' s', 2)} (limit {fmt(None if hb is None else hb + 2, ' s', 1)})",
            verdict(None if p99 is None or hb is None else p99 <= hb + 2),
        ],
        [
            "side effect exactly once after every kill",
            str(rec.get("effects_exactly_once", "—")),
            verdict(rec.get("effects_exactly_once") if rec else None),
        ],
        [
            "mirror lag p95 under 200 ms, one run at a time",
            fmt(lag, " ms"),
            verdict(None if lag is None else lag < 200),
        ],
        [
            f"mirror lag p95 under 200 ms, {load.get('level', '?')} concurrent runs",
            fmt(lag_load, " ms"),
            verdict(None if lag_load is None else lag_load < 200),
        ],
    ]
    return render_table(["target", "measured", "verdict"], rows)


def profile_table(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """Before/after the hot-path fixes, at the profiled concurrency."""
    keys = [
        ("steps_per_second", "steps/s", " ", 1),
        ("runs_per_second", "runs/s", " ", 2),
        ("worker_cpu_ms_per_step", "worker CPU per step", " ms", 1),
        ("temporal_cpu_ms_per_step", "Temporal server CPU per step", " ms", 1),
        ("rss_mb", "worker RSS (peak)", " MB", 0),
    ]
    rows: list[list[object]] = []
    for key, label, unit, digits in keys:
        b = (before or {}).get(key)
        a = (after or {}).get(key)
        rows.append(
            [
                label,
                fmt(b, unit.strip() and unit, digits),
                fmt(a, unit.strip() and unit, digits),
                fmt_ratio(ratio(a, b)),
            ]
        )
    return render_table(["at 100 concurrent runs", "before", "after", "after ÷ before"], rows)


def machine_line(machine: dict[str, Any]) -> str:
    return (
        f"{machine.get('nproc')} cores ({machine.get('cpu_model')}), "
        f"{machine.get('memory_gib')} GiB RAM, {machine.get('os')}; Python "
        f"{machine.get('python')}, temporalio {machine.get('temporalio')}, "
        f"{machine.get('temporal_cli')}, {machine.get('postgres')}"
    )


def full_report(results: dict[str, Any]) -> str:
    parts = [
        f"Machine: {machine_line(results.get('machine') or {})}",
        f"Run: {results.get('started_at', '?')}, {fmt(results.get('wall_seconds'), ' s', 0)}"
        f" in all; {results.get('config', {}).get('mode', '')}",
    ]
    if any(stage in results for stage in ("overhead", "throughput", "latency", "recovery")):
        parts += [
            "",
            summary_table(results),
            "",
            f"Throughput ({_get(results, 'throughput', 'steps_per_run')} tool steps per run; "
            "steps/s counts the steps of completed runs, or, for a level cut short by its time "
            "budget, the steps done by then; RSS is the worker process's peak):",
            "",
            throughput_table(results),
            "",
            targets_table(results),
        ]
    if results.get("noisy"):
        parts += ["", noisy_table(results["noisy"])]
    if results.get("errors"):
        parts += ["", "Stages that did not finish:", ""]
        parts += [f"- {stage}: {err}" for stage, err in results["errors"].items()]
    return "\n".join(parts)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def noisy_table(results: dict[str, Any]) -> str:
    """The two modes side by side, and the issue's goals checked against them."""
    off, on = results.get("off") or {}, results.get("on") or {}

    def get(mode: dict[str, Any], key: str, stat: str | None = None) -> float | None:
        value = mode.get(key)
        return value.get(stat) if isinstance(value, dict) and stat else value

    rows = [
        ("idle: B-sized burst, first step p50", "idle_first_step", "p50"),
        ("idle: first step p95", "idle_first_step", "p95"),
        ("B start -> first step p50", "b_first_step", "p50"),
        ("B start -> first step p95", "b_first_step", "p95"),
        ("B start -> completion p50", "b_completion", "p50"),
        ("B start -> completion p95", "b_completion", "p95"),
        ("priority-1 run: start -> first step", "urgent_first_step", None),
        ("priority-1 run: start -> completion", "urgent_completion", None),
    ]
    lines = [
        f"Noisy neighbour: tenant A starts {results.get('runs')} runs at once, then tenant B "
        f"starts {results.get('neighbours')} and one priority-1 run follows (1 tool step each):",
        "",
        "| | fairness off | fairness on |",
        "| --- | --- | --- |",
    ]
    for label, key, stat in rows:
        lines.append(f"| {label} | {_secs(get(off, key, stat))} | {_secs(get(on, key, stat))} |")
    lines.append(
        f"| A's runs done when B's were | {off.get('a_done_when_b_done', '-')} "
        f"| {on.get('a_done_when_b_done', '-')} |"
    )
    lines.append(
        f"| B first step p95 / idle p95 | "
        f"{_times(ratio(get(off, 'b_first_step', 'p95'), get(off, 'idle_first_step', 'p95')))} | "
        f"{_times(ratio(get(on, 'b_first_step', 'p95'), get(on, 'idle_first_step', 'p95')))} |"
    )
    lines.append(
        f"| B completion p95 / idle p95 | "
        f"{_times(ratio(get(off, 'b_completion', 'p95'), get(off, 'idle_completion', 'p95')))} | "
        f"{_times(ratio(get(on, 'b_completion', 'p95'), get(on, 'idle_completion', 'p95')))} |"
    )
    return "\n".join(lines)
