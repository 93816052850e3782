"""The plot: throughput and per-step latency against concurrency, ours beside the references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SERIES = [
    ("ours", "agentledger (ours)", "o-"),
    ("bare_agent", "bare agent (Temporal)", "d-."),
    ("bare", "bare activities (Temporal)", "s--"),
    ("pgq", "PG queue", "^:"),
]


def draw(results: dict[str, Any], path: Path) -> Path | None:
    """Write a PNG with two panels; returns None (and draws nothing) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    levels = results.get("throughput", {}).get("levels", [])
    if not levels:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, style in SERIES:
        rate = [
            (row["level"], row[key]["steps_per_second"])
            for row in levels
            if (row.get(key) or {}).get("steps_per_second")
        ]
        if rate:
            left.plot([x for x, _ in rate], [y for _, y in rate], style, label=label)
        lat = [
            (row["level"], row[key]["step_ms_p50"])
            for row in levels
            if (row.get(key) or {}).get("step_ms_p50") is not None
        ]
        if lat:
            right.plot([x for x, _ in lat], [y for _, y in lat], style, label=label)
    left.set_title("Throughput (completed steps/s)")
    right.set_title("Per-step latency, p50 (ms) = run time / steps")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("concurrent runs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    machine = results.get("machine", {})
    fig.suptitle(
        f"agentledger benchmarks — {machine.get('nproc', '?')} cores, "
        f"{machine.get('cpu_model', '?')}, {results.get('started_at', '')[:16]}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
