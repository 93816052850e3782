"""One change measured in one run: agentledger's per-step figures on an earlier commit and on
this tree, taking turns, side by side (the machines are noisy, so never two separate runs).

    python bench/before_after.py be32c25            # 3 rounds each, 20 steps x 8 runs
    python bench/before_after.py HEAD~1 --rounds 5 --json out.json
    python bench/before_after.py HEAD~1 --stage throughput --level 100
    python bench/before_after.py HEAD~1 --stage long --steps 300

Each round runs `bench/run.py --systems ours --stages overhead` (or `throughput`, or the long
run) once on the
earlier commit (a git worktree under a temporary folder, imported first through PYTHONPATH)
and once on this tree, alternating which goes first, each on its own fresh embedded stack.
It prints every round's figures (overhead: per-step p50 one run at a time and back to back,
wall time per step; throughput: steps/s, worker CPU per step and mirror lag at one level of
concurrent runs; long: one run of N tool calls, its time and worker CPU per step), then the
medians and the ratio this tree ÷ the earlier one.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OVERHEAD = {  # name: (mode, measure) in the overhead stage's "ours"
    "per-step p50, one run at a time (ms)": ("isolated", "step_ms"),
    "per-step p50, back to back (ms)": ("back_to_back", "step_ms"),
    "run time / steps p50, one at a time (ms)": ("isolated", "wall_per_step_ms"),
}
THROUGHPUT = (  # figures of "ours" at the level, from the throughput stage
    "steps/s",
    "worker CPU per step (ms)",
    "Temporal CPU per step (ms)",
    "mirror lag p50 (ms)",
    "mirror lag p95 (ms)",
    # The server's own counters per step: what a change spares it, whatever the machine's load.
    "writes of a workflow's state per step",
    "activities through matching per step",
    "history bytes per run",
)
LONG = (  # figures of "ours" in the long-run stage
    "time per step, steps 11-20 (ms)",
    "time per step, last 10 (ms)",
    "worker CPU per step (ms)",
    "history bytes per step, last 10",
)


def measure(args: argparse.Namespace, tree: Path, out: Path) -> dict[str, float]:
    """One stage of agentledger on `tree`: its figures."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "bench/run.py", "--systems", "ours", "--stages", args.stage]
    if args.stage == "overhead":
        command += ["--steps", str(args.steps), "--runs", str(args.runs), "--levels", "1"]
    elif args.stage == "long":
        command = [*command[:4], "--long", "--long-pages", str(args.steps)]
    else:
        command += ["--levels", str(args.level), "--level-steps", str(args.steps)]
    done = subprocess.run(
        [*command, "--out", str(out)], cwd=tree, env=env, text=True, capture_output=True
    )
    results = sorted(out.glob("bench-*.json"))
    if done.returncode != 0 or not results:
        raise SystemExit(
            f"bench/run.py failed on {tree}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    report = json.loads(results[-1].read_text())
    if args.stage == "overhead":
        ours = report["overhead"]["ours"]
        return {name: ours[mode][what]["p50"] for name, (mode, what) in OVERHEAD.items()}
    if args.stage == "long":
        ours = report["long_run"]["ours"]
        # From each step's time (every version of the stage records them).
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(ours["steps"])]
        long_figures = (
            statistics.mean(gaps[10:20]),
            statistics.mean(gaps[-10:]),
            ours["worker_cpu_ms_per_step"],
            ours["bytes_per_step"]["last"],
        )
        return dict(zip(LONG, long_figures, strict=True))
    [level] = report["throughput"]["levels"]
    ours, lag = level["ours"], report["throughput"]["mirror_lag_under_load"]["ms"]
    server = ours.get("server_work_per_step") or {}
    figures = (
        ours["steps_per_second"],
        ours["worker_cpu_ms_per_step"],
        ours["temporal_cpu_ms_per_step"],
        lag["p50"],
        lag["p95"],
        server.get("workflow_state_writes", float("nan")),
        server.get("activities_through_matching", float("nan")),
        ours.get("history_bytes", float("nan")),
    )
    return dict(zip(THROUGHPUT, figures, strict=True))


def short_rev(rev: str) -> str:
    """`rev` as a short commit id, or '' if it names no commit of this repository."""
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def earlier_tree(rev: str, scratch: Path) -> Iterator[Path]:
    """A git worktree of `rev` under `scratch` while the block runs, then removed."""
    earlier = scratch / "tree"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", str(earlier), rev],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield earlier
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(earlier)],
            cwd=ROOT,
            capture_output=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the earlier commit (anything `git worktree add` takes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stage", choices=("overhead", "throughput", "long"), default="overhead")
    parser.add_argument("--steps", type=int, default=20, help="tool steps per run")
    parser.add_argument("--runs", type=int, default=8, help="overhead: runs per stage")
    parser.add_argument(
        "--level", type=int, default=100, help="throughput: concurrent runs (at most 100)"
    )
    parser.add_argument("--json", type=Path, help="also write every round's figures here")
    args = parser.parse_args()
    if not 1 <= args.level <= 100:  # the bench samples the mirror's lag up to 100 runs
        parser.error("--level must be 1 to 100")
    rev = short_rev(args.rev)
    if not rev:
        raise SystemExit(f"{args.rev!r} is not a commit of this repository")
    here = short_rev("HEAD")
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    loads: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="agentledger-before-") as scratch,
        earlier_tree(rev, Path(scratch)) as earlier,
    ):
        for n in range(args.rounds):
            order = [("before", earlier), ("after", ROOT)]
            for side, tree in order if n % 2 == 0 else order[::-1]:
                loads.append(os.getloadavg()[0])
                figures = measure(args, tree, Path(scratch) / f"{side}-{n}")
                rounds[side].append(figures)
                shown = ", ".join(f"{v:.1f}" for v in figures.values())
                print(
                    f"round {n + 1}: {side:6} ({rev if side == 'before' else here}) {shown}"
                    f" (load average {loads[-1]:.1f})",
                    flush=True,
                )
    runs = {"overhead": args.runs, "throughput": args.level, "long": 1}[args.stage]
    print(
        f"\nmedian of {args.rounds} rounds, {runs} runs of {args.steps} steps each; load "
        f"average (1 min) at each round's start {min(loads):.1f} to {max(loads):.1f}"
    )
    print(f"| figure | {rev} (before) | {here} (after) | after ÷ before |")
    print("| --- | --- | --- | --- |")
    medians: dict[str, Any] = {}
    for name in {"overhead": OVERHEAD, "throughput": THROUGHPUT, "long": LONG}[args.stage]:
        before = statistics.median(r[name] for r in rounds["before"])
        after = statistics.median(r[name] for r in rounds["after"])
        change = after / before if before else float("nan")
        medians[name] = {"before": before, "after": after, "ratio": change}
        print(f"| {name} | {before:.2f} | {after:.2f} | {change:.2f}x |")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "before": rev,
                    "after": here,
                    "rounds": rounds,
                    "medians": medians,
                    "load_averages": loads,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
