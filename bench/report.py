"""Turn a results dict (what run.py writes as JSON) into Markdown tables. Pure functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.server_work import LABELS as SERVER_WORK
from bench.stats import fmt, fmt_ratio, ratio, render_table

SYSTEMS = ("ours", "bare_agent", "bare", "pgq")
NAMES = {"ours": "ours", "bare_agent": "bare agent", "bare": "bare activities", "pgq": "pgq"}
# The targets against the bare agent (bench/bare_agent.py): the levels they are set at.
STEPS_RATIO_MIN = 0.8
STEP_P50_RATIO_MAX = 1.25
MIRROR_LAG_P95_MAX_MS = 200.0
WORKER_CPU_RATIO_MAX = 1.5
TARGET_LEVEL = 100
# The parts a step's mirror lag under load is read in (bench/run.py Bench.mirror_lags).
LAG_PARTS = ("accepted", "dispatched", "written")


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


def _ratio_of(results: dict[str, Any], base: str, *path: str) -> str:
    ours = _get(results, "overhead", "ours", *path)
    other = _get(results, "overhead", base, *path)
    return fmt_ratio(ratio(ours, other))


def _ratios(results: dict[str, Any], *path: str) -> list[str]:
    """ours ÷ bare agent, then ours ÷ bare activities, of one overhead figure."""
    return [_ratio_of(results, base, *path) for base in ("bare_agent", "bare")]


def _p50(summary: Any) -> str:
    value = summary.get("p50") if isinstance(summary, dict) and summary.get("n") else None
    return fmt(value, " ms")


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) and value else "—"


def summary_table(results: dict[str, Any]) -> str:
    """The figures of one run at a time: ours beside the bare agent, bare activities and the
    Postgres queue, with ours ÷ bare agent (the fair baseline) and ÷ bare activities (the floor)."""
    o = results.get("overhead") or {}
    steps = o.get("steps", "N")
    dash = ["—", "—", "—", "—", "—"]
    rows: list[list[object]] = []
    for mode, label in (("isolated", "one run at a time"), ("back_to_back", "runs back to back")):
        rows.append(
            [
                f"per-step latency p50 / p99, {steps} steps, {label}",
                *(_pair(_get(o, k, mode, "step_ms")) for k in SYSTEMS),
                *(
                    f"{a} / {b}"
                    for a, b in zip(
                        _ratios(results, mode, "step_ms", "p50"),
                        _ratios(results, mode, "step_ms", "p99"),
                        strict=True,
                    )
                ),
            ]
        )
    rows.append(
        [
            "run time ÷ steps, p50 (one at a time)",
            *(_p50(_get(o, k, "isolated", "wall_per_step_ms")) for k in SYSTEMS),
            *_ratios(results, "isolated", "wall_per_step_ms", "p50"),
        ]
    )
    rows.append(
        [
            f"activities scheduled per run, {steps} tool steps",
            *(_count(_get(o, k, "isolated", "activities_per_run")) for k in SYSTEMS),
            *_ratios(results, "isolated", "activities_per_run"),
        ]
    )
    lat = results.get("latency") or {}
    first = lat.get("start_to_first_step_ms") or {}
    rows.append(
        [
            "start → first step starts, p50 / p99",
            *(_pair(first.get(k)) for k in ("ours", "bare_agent", "bare")),
            "—",
            *(
                fmt_ratio(ratio(_get(first, "ours", "p50"), _get(first, base, "p50")))
                for base in ("bare_agent", "bare")
            ),
        ]
    )
    rows.append(
        [
            "approval sent → handled (update returns), p50 / p99",
            _pair(lat.get("approval_update_ms")),
            *dash,
        ]
    )
    rows.append(
        [
            "approval sent → approved step starts, p50 / p99",
            _pair(lat.get("approval_to_step_ms")),
            *dash,
        ]
    )
    rec = results.get("recovery") or {}
    hb = rec.get("heartbeat_seconds")
    rows.append(
        [
            f"recovery: SIGKILL → step retried on another worker, p50 / p99 "
            f"({rec.get('kills', 0)} kills, heartbeat timeout {fmt(hb, ' s', 0)})",
            _pair(rec.get("seconds_kill_to_retry"), unit=" s"),
            *dash,
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
            *dash,
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
            *dash,
        ]
    )
    parts = _get(load, "parts_ms") if isinstance(load, dict) else None
    if isinstance(parts, dict):
        rows.append(
            [
                f"that lag at {load.get('level')} concurrent by part, p50 / p95: step done → "
                "the activity carrying its rows scheduled; → that activity started; → rows "
                "written",
                "; ".join(_pair(parts.get(k), "p50", "p95") for k in LAG_PARTS),
                *dash,
            ]
        )
    accepted = _get(results, "throughput", "acceptance_lag_under_load")
    if isinstance(accepted, dict):
        ours_ms, agent_ms = accepted.get("ours"), accepted.get("bare_agent")
        rows.append(
            [
                "step done in Temporal → accepted by the run's workflow task, p50 / p95, "
                f"at {accepted.get('level')} concurrent",
                _pair(ours_ms, "p50", "p95"),
                _pair(agent_ms, "p50", "p95"),
                "—",
                "—",
                fmt_ratio(ratio(_get(ours_ms, "p95"), _get(agent_ms, "p95"))),
                "—",
            ]
        )
    return render_table(
        [
            "measure",
            "agentledger (ours)",
            "bare agent",
            "bare activities",
            "PG queue",
            "ours ÷ bare agent",
            "ours ÷ bare activities",
        ],
        rows,
    )


def _slash(*values: str) -> str:
    return " / ".join(values)


def throughput_table(results: dict[str, Any]) -> str:
    levels = _get(results, "throughput", "levels") or []
    rows: list[list[object]] = []
    for row in levels:
        by = {k: row.get(k) or {} for k in SYSTEMS}
        notes = [
            f"{NAMES[k]}: {r.get('completed')}/{r.get('started')} runs done in the time budget"
            + (f", {r['steps_done']} steps" if r.get("steps_done") else "")
            for k, r in by.items()
            if r.get("timed_out")
        ]
        notes += [f"{NAMES[k]}: {r['error']}" for k, r in by.items() if r.get("error")]
        ours, agent, bare = by["ours"], by["bare_agent"], by["bare"]
        trio = (ours, agent, bare)
        rows.append(
            [
                row["level"],
                *(fmt(r.get("steps_per_second")) for r in (*trio, by["pgq"])),
                fmt_ratio(ratio(ours.get("steps_per_second"), agent.get("steps_per_second"))),
                fmt_ratio(ratio(ours.get("steps_per_second"), bare.get("steps_per_second"))),
                _slash(*(fmt(r.get("worker_cpu_ms_per_step"), " ms", 1) for r in trio)),
                fmt_ratio(
                    ratio(ours.get("worker_cpu_ms_per_step"), agent.get("worker_cpu_ms_per_step"))
                ),
                _slash(*(fmt(r.get("gc_ms_per_step"), " ms", 2) for r in trio)),
                _slash(*(fmt(r.get("temporal_cpu_ms_per_step"), " ms") for r in trio)),
                _slash(*(fmt(r.get("rss_mb"), " MB", 0) for r in trio)),
                "; ".join(notes) or "",
            ]
        )
    return render_table(
        [
            "concurrent runs",
            "ours steps/s",
            "bare agent steps/s",
            "bare activities steps/s",
            "PG queue steps/s",
            "ours ÷ bare agent steps/s",
            "ours ÷ bare activities steps/s",
            "worker CPU/step, ours / agent / activities",
            "ours ÷ bare agent worker CPU/step",
            "of which garbage collection, ours / agent / activities",
            "Temporal server CPU/step, ours / agent / activities",
            "worker RSS, ours / agent / activities",
            "note",
        ],
        rows,
    )


def server_work_table(results: dict[str, Any], level: int = TARGET_LEVEL) -> str | None:
    """What the Temporal server did per step at one level, from its own counters, beside its
    CPU per step and one run's history: what each system's server CPU was spent on."""
    row = _level(results, level)
    if row is None:
        return None
    trio = [row.get(k) or {} for k in ("ours", "bare_agent", "bare")]
    work = [r.get("server_work_per_step") or {} for r in trio]
    if not any(work):
        return None

    def line(label: str, values: list[Any], digits: int = 2, unit: str = "") -> list[object]:
        return [label, *(fmt(v, unit, digits) for v in values), fmt_ratio(ratio(*values[:2]))]

    rows = [
        line(
            "Temporal server CPU per step",
            [r.get("temporal_cpu_ms_per_step") for r in trio],
            1,
            " ms",
        ),
        *(
            line(f"{label}, per step", [w.get(key) for w in work])
            for key, label in SERVER_WORK.items()
        ),
        line("history events of one run", [r.get("history_events") for r in trio], 0),
        line("history size of one run", [r.get("history_bytes") for r in trio], 0, " B"),
    ]
    return render_table(
        [
            f"at {level} concurrent runs",
            "ours",
            "bare agent",
            "bare activities",
            "ours ÷ bare agent",
        ],
        rows,
    )


def _level(results: dict[str, Any], level: int) -> dict[str, Any] | None:
    for row in _get(results, "throughput", "levels") or []:
        if row.get("level") == level:
            return dict(row)
    return None


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "**not met**")


def targets_table(results: dict[str, Any]) -> str:
    """The targets, each with the figures measured and whether it is met: first
    ours ÷ the bare agent (the headline), then recovery and mirror lag."""
    rows: list[list[object]] = []
    at_target = _level(results, TARGET_LEVEL) or {}
    against_agent: list[tuple[str, dict[str, Any], tuple[str, ...], str, Callable[[float], bool]]]
    against_agent = [
        (
            f"per-step p50 ≤ {STEP_P50_RATIO_MAX}x bare agent, one run at a time",
            results.get("overhead") or {},
            ("isolated", "step_ms", "p50"),
            " ms",
            lambda r: r <= STEP_P50_RATIO_MAX,
        ),
        *(
            (
                f"steps/s ≥ {STEPS_RATIO_MIN}x bare agent, {level} concurrent runs",
                _level(results, level) or {},
                ("steps_per_second",),
                "",
                lambda r: r >= STEPS_RATIO_MIN,
            )
            for level in (10, TARGET_LEVEL)
        ),
        (
            f"worker CPU per step ≤ {WORKER_CPU_RATIO_MAX}x bare agent, "
            f"{TARGET_LEVEL} concurrent runs",
            at_target,
            ("worker_cpu_ms_per_step",),
            " ms",
            lambda r: r <= WORKER_CPU_RATIO_MAX,
        ),
    ]
    for label, source, path, unit, ok in against_agent:
        ours, agent = _get(source, "ours", *path), _get(source, "bare_agent", *path)
        r = ratio(ours, agent)
        rows.append(
            [
                label,
                fmt(ours, unit),
                fmt(agent, unit),
                fmt_ratio(r),
                _verdict(None if r is None else ok(r)),
            ]
        )
    load = _get(results, "throughput", "mirror_lag_under_load") or {}
    lag_load = _get(load, "ms", "p95") if load.get("level") == TARGET_LEVEL else None
    accepted = _get(results, "throughput", "acceptance_lag_under_load") or {}
    floor = _get(accepted, "bare_agent", "p95") if accepted.get("level") == TARGET_LEVEL else None
    rows.append(
        [
            f"mirror lag p95 ≤ {MIRROR_LAG_P95_MAX_MS:.0f} ms, {TARGET_LEVEL} concurrent runs "
            "(bare agent: a step's acceptance by its run, the floor of any write after it)",
            fmt(lag_load, " ms"),
            fmt(floor, " ms"),
            fmt_ratio(ratio(lag_load, floor)),
            _verdict(None if lag_load is None else lag_load <= MIRROR_LAG_P95_MAX_MS),
        ]
    )
    rec = results.get("recovery") or {}
    p99 = _get(rec, "seconds_kill_to_retry", "p99")
    hb = rec.get("heartbeat_seconds")
    lag = _get(results, "overhead", "mirror_lag_ms", "p95")
    rows += [
        [
            "recovery p99 within the heartbeat timeout + 2 s",
            f"{fmt(p99, ' s', 2)} (limit {fmt(None if hb is None else hb + 2, ' s', 1)})",
            "—",
            "—",
            _verdict(None if p99 is None or hb is None else p99 <= hb + 2),
        ],
        [
            "side effect exactly once after every kill",
            str(rec.get("effects_exactly_once", "—")),
            "—",
            "—",
            _verdict(rec.get("effects_exactly_once") if rec else None),
        ],
        [
            f"mirror lag p95 ≤ {MIRROR_LAG_P95_MAX_MS:.0f} ms, one run at a time",
            fmt(lag, " ms"),
            "—",
            "—",
            _verdict(None if lag is None else lag <= MIRROR_LAG_P95_MAX_MS),
        ],
    ]
    return render_table(["target", "ours", "bare agent", "ours ÷ bare agent", "verdict"], rows)


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


def profile_parts_table(profile: dict[str, Any], title: str | None = None) -> str:
    """Ours' worker beside the bare agent's (and the peers' profiled in the same run), at the
    profiled level: each part's share of the sampled time times the worker's measured CPU
    per step, so the parts add up to it."""
    ours = profile
    others = [k for k in PROFILED if profile.get(k)]

    def ms(side: dict[str, Any], part: str) -> float | None:
        if part == "worker CPU per step":
            value = side.get("worker_cpu_ms_per_step")
            return None if value is None else float(value)
        share = ((side.get("top") or {}).get("part_share") or {}).get(part)
        cpu = side.get("worker_cpu_ms_per_step")
        return None if share is None or cpu is None else share * cpu

    parts = list(((ours.get("top") or {}).get("part_share") or {}).keys())
    rows: list[list[object]] = []
    for part in [*parts, "worker CPU per step"]:
        a = ms(ours, part)
        row: list[object] = [part, fmt(a, " ms", 2)]
        for other in others:
            b = ms(profile[other], part)
            gap = None if a is None or b is None else a - b
            row += [fmt(b, " ms", 2), fmt(gap, " ms", 2)]
        rows.append(row)
    level = ours.get("level", "?")
    headers = [title or f"worker CPU per step at {level} concurrent runs, by part", "ours"]
    for other in others:
        name = PROFILED[other]
        headers += [name, "gap" if len(others) == 1 else f"ours minus {name}"]
    return render_table(headers, rows)


# The workers profiled beside ours (`--stages profile`), when `--systems` names them.
PROFILED = {"bare_agent": "bare agent", "openai_agents": "OpenAI Agents + Temporal"}


PEERS = ("openai_agents", "pydantic_ai")
PEER_NAMES = {
    "openai_agents": "OpenAI Agents + Temporal",
    "pydantic_ai": "Pydantic AI TemporalAgent",
}
# The targets against the best peer on each figure.
PEER_STEP_P50_MAX = 1.0
PEER_STEPS_RATIO_MIN = 1.0
PEER_HISTORY_RATIO_MAX = 1.0
MIRROR_LAG_FLOOR_RATIO_MAX = 2.0


def _history_level(results: dict[str, Any]) -> dict[str, Any] | None:
    """The level whose rows carry one run's history: 100 runs if measured, else the first."""
    levels = _get(results, "throughput", "levels") or []
    return _level(results, TARGET_LEVEL) or (levels[0] if levels else None)


def _level_figure(row: dict[str, Any], system: str, figure: str) -> Any:
    """A system's figure at a level; a level in which it finished no run in its time budget
    did 0 steps/s and has no cost per step."""
    found = row.get(system)
    if isinstance(found, dict) and found.get("timed_out") and not found.get("completed"):
        return 0.0 if figure == "steps_per_second" else None
    return _get(found, figure)


def peer_figures(results: dict[str, Any]) -> list[tuple[str, str, Callable[[str], Any]]]:
    """(figure, which way is better, how to read it for a system) for every figure the
    peers have: lower is better but for steps/s."""
    figures: list[tuple[str, str, Callable[[str], Any]]] = [
        (
            "per-step p50, one run at a time (ms)",
            "lower",
            lambda k: _get(results, "overhead", k, "isolated", "step_ms", "p50"),
        ),
        (
            "wall time per step p50, one run at a time (ms)",
            "lower",
            lambda k: _get(results, "overhead", k, "isolated", "wall_per_step_ms", "p50"),
        ),
    ]
    for row in _get(results, "throughput", "levels") or []:
        n = row.get("level")
        figures += [
            (
                f"steps/s, {n} concurrent",
                "higher",
                lambda k, r=row: _level_figure(r, k, "steps_per_second"),
            ),
            (
                f"worker CPU per step, {n} concurrent (ms)",
                "lower",
                lambda k, r=row: _level_figure(r, k, "worker_cpu_ms_per_step"),
            ),
            (
                f"server CPU per step, {n} concurrent (ms)",
                "lower",
                lambda k, r=row: _level_figure(r, k, "temporal_cpu_ms_per_step"),
            ),
        ]
    history = _history_level(results)
    if history is not None:
        figures += [
            (
                f"history bytes per run ({history.get('level')} concurrent)",
                "lower",
                lambda k: _get(history, k, "history_bytes"),
            ),
            (
                f"history events per run ({history.get('level')} concurrent)",
                "lower",
                lambda k: _get(history, k, "history_events"),
            ),
        ]
    figures += [
        (
            "start → first step p50 (ms)",
            "lower",
            lambda k: _get(results, "latency", "start_to_first_step_ms", k, "p50"),
        ),
        (
            "approval sent → handled p50 (ms; the peers ship no approval over Temporal)",
            "lower",
            lambda k: (
                _get(results, "latency", "approval_update_ms", "p50") if k == "ours" else None
            ),
        ),
        (
            "SIGKILL under a model call → its retry starts, p50 (s)",
            "lower",
            lambda k: _get(
                results, "recovery", "kill_under_model_call", k, "kill_to_retry_s", "p50"
            ),
        ),
    ]
    return figures


def _best(values: list[Any], better: str) -> Any:
    found = [v for v in values if isinstance(v, int | float)]
    if not found:
        return None
    return max(found) if better == "higher" else min(found)


def peers_table(results: dict[str, Any]) -> str:
    """Ours ÷ each peer on every figure; beside it ours for a tenant with a model-call rate
    (what the rate costs: its model calls leave the fast path) and ours with every tool call
    an activity of its own (what local read-only tools spare)."""
    rows: list[list[object]] = []
    for label, _, read in peer_figures(results):
        ours = read("ours")
        peers = [read(k) for k in PEERS]
        digits = 0 if "bytes" in label or "events" in label else 1
        rows.append(
            [
                label,
                fmt(ours, digits=digits),
                fmt(read("ours_rated"), digits=digits),
                fmt(read("ours_remote_tools"), digits=digits),
                *(fmt(v, digits=digits) for v in peers),
                *(fmt_ratio(ratio(ours, v)) for v in peers),
                fmt_ratio(ratio(read("ours_rated"), ours)),
                fmt_ratio(ratio(read("ours_remote_tools"), ours)),
            ]
        )
    return render_table(
        [
            "figure",
            "ours",
            "ours, a tenant with a model-call rate",
            "ours, every tool an activity of its own",
            *(PEER_NAMES[k] for k in PEERS),
            *(f"ours ÷ {PEER_NAMES[k]}" for k in PEERS),
            "rated ÷ ours",
            "remote tools ÷ ours",
        ],
        rows,
    )


def peer_targets_table(results: dict[str, Any]) -> str:
    """Each target against the best peer on its figure, with the mirror on."""
    rows: list[list[object]] = []

    def against_best(label: str, read: Callable[[str], Any], better: str, ok: Any) -> None:
        ours = read("ours")
        best = _best([read(k) for k in PEERS], better)
        r = ratio(ours, best)
        rows.append(
            [label, fmt(ours), fmt(best), fmt_ratio(r), _verdict(None if r is None else ok(r))]
        )

    against_best(
        f"per-step p50 ≤ {PEER_STEP_P50_MAX:.1f}x the best peer",
        lambda k: _get(results, "overhead", k, "isolated", "step_ms", "p50"),
        "lower",
        lambda r: r <= PEER_STEP_P50_MAX,
    )
    for row in _get(results, "throughput", "levels") or []:
        if row.get("level") in (10, 100, 1000):
            against_best(
                f"steps/s ≥ {PEER_STEPS_RATIO_MIN:.1f}x the best peer, {row['level']} concurrent",
                lambda k, r=row: _level_figure(r, k, "steps_per_second"),
                "higher",
                lambda r: r >= PEER_STEPS_RATIO_MIN,
            )
    history = _history_level(results)
    if history is not None:
        against_best(
            f"history bytes per run ≤ {PEER_HISTORY_RATIO_MAX:.1f}x the best peer",
            lambda k: _get(history, k, "history_bytes"),
            "lower",
            lambda r: r <= PEER_HISTORY_RATIO_MAX,
        )
    load = _get(results, "throughput", "mirror_lag_under_load") or {}
    accepted = _get(results, "throughput", "acceptance_lag_under_load") or {}
    lag = _get(load, "ms", "p95")
    floor = _get(accepted, "ours", "p95")
    r = ratio(lag, floor)
    rows.append(
        [
            f"mirror lag p95 within {MIRROR_LAG_FLOOR_RATIO_MAX:.0f}x its floor (a step's "
            f"acceptance by its run, p95), {load.get('level', '?')} concurrent (ms)",
            fmt(lag),
            fmt(floor),
            fmt_ratio(r),
            _verdict(None if r is None else r <= MIRROR_LAG_FLOOR_RATIO_MAX),
        ]
    )
    return render_table(["target", "ours", "best peer (or floor)", "ratio", "met"], rows)


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
    load = (results.get("machine") or {}).get("load_average_at_start")
    said = [results["note"]] if results.get("note") else []
    said += [f"load average at the start {load[0]:.1f}"] if load else []
    if said:
        parts.append("Load: " + "; ".join(said))
    measured_peers = any(
        isinstance(_get(results, "overhead", k), dict)
        or any(isinstance(row.get(k), dict) for row in _get(results, "throughput", "levels") or [])
        for k in PEERS
    )
    if measured_peers:
        parts += [
            "",
            "Ours ÷ each peer (the same agent, model server, tool and task on "
            "the OpenAI Agents SDK with Temporal's plugin and on Pydantic AI's TemporalAgent; "
            "ours with its mirror and ledger on; below 1.00x is less, for steps/s less is "
            "worse; `rated ÷ ours`: what a tenant's model-call rate costs, its model calls "
            "going through the rate-limited queue instead of the run's own):",
            "",
            peers_table(results),
            "",
            "Targets against the best peer on each figure:",
            "",
            peer_targets_table(results),
            "",
            "Why a target is not met, from profiles of this run, and what would move it: "
            "[docs/bench/peers.md](peers.md).",
        ]
    if any(stage in results for stage in ("overhead", "throughput", "latency", "recovery")):
        parts += [
            "",
            "Targets (ours ÷ bare agent, the same agent loop on bare Temporal, is the "
            "headline ratio):",
            "",
            targets_table(results),
            "",
            summary_table(results),
            "",
            f"Throughput ({_get(results, 'throughput', 'steps_per_run')} tool steps per run; "
            "steps/s counts the steps of completed runs, or, for a level cut short by its time "
            "budget, the steps done by then; RSS is the worker process's peak):",
            "",
            throughput_table(results),
        ]
        server = server_work_table(results)
        if server is not None:
            parts += [
                "",
                "What the Temporal server did (its own counters over the level, per step done):",
                "",
                server,
            ]
    if any((results.get("profile") or {}).get(k) for k in PROFILED):
        parts += [
            "",
            "Where the worker's CPU goes (py-spy, each sample in the first part its stack "
            "passes through"
            + (", only samples holding the GIL" if _get(results, "config", "profile_gil") else "")
            + "):",
            "",
            profile_parts_table(results["profile"]),
        ]
    if results.get("noisy"):
        parts += ["", noisy_table(results["noisy"])]
    if results.get("long_run"):
        parts += ["", long_run_table(results["long_run"])]
        profiled = long_run_profile(results["long_run"])
        if profiled is not None:
            parts += [
                "",
                "Where each worker's CPU goes over the long run (py-spy throughout the run, each "
                "sample in the first part its stack passes through):",
                "",
                profiled,
            ]
    if results.get("scale_out"):
        parts += ["", scale_out_table(results["scale_out"])]
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


# ------------------------------------------------------------------ the long run

LONG_RUN_NAMES = {
    "ours": "agentledger",
    "openai_agents": "OpenAI Agents + Temporal",
    "pydantic_ai": "Pydantic AI TemporalAgent",
    "bare_agent": "bare agent loop",
}


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e6:,.2f} MB"


def _kb(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e3:,.1f} KB"


def _history_at(row: dict[str, Any], step: int) -> str:
    at = row["at_step"].get(str(step))
    if at is None:
        return "not reached"
    text = f"{_mb(at['chain_bytes'])} / {at['chain_events']:,}"
    if row["runs_in_chain"] > 1:
        text += f" (this run: {_mb(at['run_bytes'])} / {at['run_events']:,})"
    return text + f"; {fmt(at.get('step_ms'), ' ms')}"


def long_run_table(stage: dict[str, Any]) -> str:
    """The long-run figures, one column per system."""
    systems = [s for s in stage.get("systems", []) if "steps_done" in (stage.get(s) or {})]
    if not systems:
        return "Long run: no system measured."
    pages = stage.get("pages")
    window = stage[systems[0]]["window"]

    def ended(row: dict[str, Any]) -> str:
        if row["finished"]:
            return f"yes, {row['steps_done']} steps"
        why = (
            "the bench's time budget"
            if row["cut_off_by_budget"]
            else row["reason"] or row["closing"]
        )
        return f"**no**: stopped at step {row['steps_done']} ({why})"

    rows: list[list[Any]] = [["finished", *(ended(stage[s]) for s in systems)]]
    for step in stage["marks"]:
        rows.append(
            [
                f"step {step}: history bytes / events (whole chain, and the current run "
                f"if it continued as new); time per step (mean of the {window} before)",
                *(_history_at(stage[s], step) for s in systems),
            ]
        )
    rows.append(
        ["runs in the chain (continue-as-new)", *(stage[s]["runs_in_chain"] for s in systems)]
    )
    rows.append(
        ["largest run in the chain", *(_mb(stage[s]["largest_run_bytes"]) for s in systems)]
    )
    for label, key, show in (
        ("history bytes per step", "bytes_per_step", _kb),
        ("history events per step", "events_per_step", lambda v: fmt(v)),
        ("time per step", "step_ms", lambda v: fmt(v, " ms")),
    ):
        rows.append(
            [
                f"{label}: first {window} steps → last {window} (last ÷ first)",
                *(
                    f"{show(f['first'])} → {show(f['last'])} ({fmt_ratio(f['ratio'])})"
                    for s in systems
                    for f in [stage[s][key]]
                ),
            ]
        )
    rows.append(
        [
            f"time per step: steps {window + 1}-{2 * window} (after the server's first "
            f"dispatches, bench/server_pace.py) → last {window} (last ÷ those)",
            *(
                f"{fmt(f['first'], ' ms')} → {fmt(f['last'], ' ms')} ({fmt_ratio(f['ratio'])})"
                if f
                else "—"
                for s in systems
                for f in [stage[s].get("step_ms_settled")]
            ),
        ]
    )
    rows.append(["worker peak RSS", *(fmt(stage[s]["rss_mb_peak"], " MB", 0) for s in systems)])
    rows.append(
        [
            "worker / Temporal server CPU per step",
            *(
                f"{fmt(stage[s]['worker_cpu_ms_per_step'], ' ms')} / "
                f"{fmt(stage[s]['temporal_cpu_ms_per_step'], ' ms')}"
                for s in systems
            ),
        ]
    )
    rows.append(
        ["wall time of the run", *(fmt(stage[s]["wall_seconds"], " s", 0) for s in systems)]
    )
    head = ["", *(LONG_RUN_NAMES[s] for s in systems)]
    return (
        f"Long run: {pages} tool calls, one per model turn, each result "
        f"{stage.get('page_chars', 0):,} characters, the model seeing the whole conversation "
        "each turn; one run per system, "
        "each on a worker process of its own, one after another:\n\n" + render_table(head, rows)
    )


# ------------------------------------------------------------------ scale-out


def scale_out_table(stage: dict[str, Any]) -> str:
    """Steps/s and CPU by worker processes and level, with the ratio to one process."""
    rows: list[list[Any]] = []
    for row in stage.get("rows", []):
        if "error" in row:
            rows.append([row["level"], row["processes"], row["error"], *["—"] * 6])
            continue
        busy = row["cores_busy"]
        rows.append(
            [
                f"{row['level']:,}",
                row["processes"],
                fmt(row["steps_per_second"])
                + (f" ({row['steps_done']:,} steps by the budget)" if row["timed_out"] else ""),
                fmt_ratio(row.get("ratio_to_one_process")),
                f"{fmt(row['workers_cpu_ms_per_step'], ' ms')} / "
                f"{fmt(row['temporal_cpu_ms_per_step'], ' ms')} / "
                f"{fmt(row['postgres_cpu_ms_per_step'], ' ms')}",
                f"{busy['workers']:.2f} / {busy['temporal']:.2f} / {busy['postgres']:.2f}",
                f"{row['machine_cores_busy']:.2f}",
                f"{row['machine_cores_idle']:.2f}",
                fmt(row.get("rss_mb_one_worker"), " MB", 0),
            ]
        )
    head = [
        "concurrent runs",
        "worker processes",
        "steps/s",
        "÷ one process",
        "CPU per step: workers / Temporal server / Postgres",
        "cores busy: workers / server / Postgres",
        "machine cores busy (everything)",
        "machine cores idle",
        "RSS of one worker",
    ]
    return (
        f"Scale-out: ours, {stage.get('steps_per_run')} tool steps per run, all runs started "
        "at once; each worker process polls the same queues, against one Temporal server and "
        "one Postgres:\n\n" + render_table(head, rows)
    )


def long_run_profile(stage: dict[str, Any]) -> str | None:
    """Ours' worker over the long run by part, beside the other workers profiled with it."""
    if not (stage.get("ours") or {}).get("top"):
        return None
    profile = {
        **stage["ours"],
        **{k: stage[k] for k in PROFILED if (stage.get(k) or {}).get("top")},
    }
    return profile_parts_table(profile, title="worker CPU per step over the long run, by part")
