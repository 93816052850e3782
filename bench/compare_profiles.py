"""Profile runs of two trees side by side: `bench/run.py --stages profile` results, combined.

    python -m bench.compare_profiles --before b1.json b2.json --after a1.json a2.json \\
        --note "what changed" --out docs/bench/profile-15-before-after.json

Each input is a results JSON that `bench/run.py --stages profile` wrote (its `latest.json`).
Runs of the two trees should alternate on the same machine, since load moves the figures;
the output keeps every run and the means, and prints the table docs/bench/history.md quotes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean
from typing import Any

from bench.run import summarize_profile

FIGURES = (
    ("steps/s", "steps_per_second", "{:.1f}"),
    ("runs/s", "runs_per_second", "{:.2f}"),
    ("worker CPU per step", "worker_cpu_ms_per_step", "{:.1f} ms"),
    ("Temporal server CPU per step", "temporal_cpu_ms_per_step", "{:.1f} ms"),
    ("worker RSS (peak)", "rss_mb", "{:.0f} MB"),
    ("Postgres transactions per step", "postgres_commits_per_step", "{:.2f}"),
)


def side(paths: list[Path]) -> dict[str, Any]:
    """The profile runs of one tree: each run's figures and shares, and their means."""
    each = []
    for path in paths:
        results = json.loads(path.read_text())
        profile = results["profile"]
        raw = Path(profile["raw"]) if profile.get("raw") else None
        if raw is not None and raw.exists():  # the shares again, by today's categories
            profile["top"] = summarize_profile(raw)
        each.append(
            {
                "load_average_at_start": results["machine"]["load_average_at_start"],
                **{key: profile.get(key) for _, key, _ in FIGURES},
                "inclusive_share": (profile.get("top") or {}).get("inclusive_share", {}),
                "top_self": (profile.get("top") or {}).get("top_self", [])[:10],
            }
        )
    # A figure older runs did not record is left out of the means, not counted as 0.
    means = {
        key: mean(found) if (found := [run[key] for run in each if run[key] is not None]) else None
        for _, key, _ in FIGURES
    }
    shares: dict[str, float] = {}
    for category in each[0]["inclusive_share"]:
        shares[category] = round(mean(run["inclusive_share"].get(category, 0) for run in each), 3)
    return {"runs": len(each), **means, "inclusive_share": shares, "each": each}


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    rows = [
        "| at 100 concurrent runs | before | after | after ÷ before |",
        "| --- | --- | --- | --- |",
    ]
    for label, key, fmt in FIGURES:
        if before[key] is None or after[key] is None:
            continue
        ratio = after[key] / before[key] if before[key] else float("nan")
        rows.append(
            f"| {label} | {fmt.format(before[key])} | {fmt.format(after[key])} | {ratio:.2f}x |"
        )
    rows.append("| share of sampled worker time | | | |")
    for category, share in before["inclusive_share"].items():
        later = after["inclusive_share"].get(category, 0)
        rows.append(f"| {category} | {share:.0%} | {later:.0%} | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--note", default="", help="what the two trees are")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    before, after = side(args.before), side(args.after)
    combined = {"level": 100, "note": args.note, "before": before, "after": after}
    args.out.write_text(json.dumps(combined, indent=2) + "\n")
    print(table(before, after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
