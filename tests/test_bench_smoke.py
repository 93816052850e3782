"""The benchmark's pure helpers on fixed data: no stack, no timing, nothing slow."""

from __future__ import annotations

import pytest

from bench import bare, ours, pg_queue, report, stats


def test_percentiles_interpolate_like_numpy() -> None:
    data = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert stats.percentile(data, 0) == 15.0
    assert stats.percentile(data, 50) == 35.0
    assert stats.percentile(data, 100) == 50.0
    assert stats.percentile(data, 40) == pytest.approx(29.0)
    assert stats.percentile(data, 95) == pytest.approx(48.0)
    assert stats.percentile([], 50) is None
    with pytest.raises(ValueError):
        stats.percentile(data, 101)


def test_summary_ratio_and_deltas() -> None:
    summary = stats.summarize([1.0, 2.0, 3.0, 4.0])
    assert summary["n"] == 4
    assert summary["mean"] == 2.5
    assert summary["p50"] == 2.5
    assert summary["p99"] == pytest.approx(3.97)
    assert stats.summarize([])["p50"] is None
    assert stats.ratio(3.0, 2.0) == 1.5
    assert stats.ratio(1.0, 0.0) is None
    assert stats.deltas([0.0, 0.5, 1.5]) == [0.5, 1.0]
    assert stats.fmt(None) == "—"
    assert stats.fmt(1234.567, " ms") == "1,234.6 ms"
    assert stats.fmt_ratio(2.0) == "2.00x"


def test_table_rendering() -> None:
    table = stats.render_table(["a", "bb"], [[1, "x"], ["long", None]])
    assert table.splitlines() == [
        "| a    | bb   |",
        "| ---- | ---- |",
        "| 1    | x    |",
        "| long | None |",
    ]
    with pytest.raises(ValueError):
        stats.render_table(["a"], [[1, 2]])


def test_report_from_fixed_results() -> None:
    step = {"n": 3, "p50": 30.0, "p95": 40.0, "p99": 45.0}
    bare_step = {"n": 3, "p50": 12.0, "p95": 14.0, "p99": 15.0}
    results = {
        "machine": {"nproc": 2, "cpu_model": "test cpu"},
        "overhead": {
            "steps": 20,
            "ours": {"isolated": {"step_ms": step, "wall_per_step_ms": step}},
            "bare": {"isolated": {"step_ms": bare_step, "wall_per_step_ms": bare_step}},
            "mirror_lag_ms": {"n": 5, "p50": 20.0, "p95": 150.0},
        },
        "throughput": {
            "steps_per_run": 5,
            "levels": [
                {
                    "level": 10,
                    "ours": {"steps_per_second": 20.0, "runs_per_second": 4.0, "rss_mb": 150},
                    "bare": {"steps_per_second": 80.0, "runs_per_second": 16.0},
                    "pgq": {"steps_per_second": 500.0},
                }
            ],
        },
        "recovery": {
            "heartbeat_seconds": 2.0,
            "kills": 2,
            "runs": 3,
            "seconds_kill_to_retry": {"n": 2, "p50": 2.2, "p99": 2.5},
            "side_effects_per_run": {"min": 1, "max": 1},
            "effects_exactly_once": True,
            "duplicates_prevented": 2,
        },
    }
    summary = report.summary_table(results)
    assert "| 30.0 / 45.0 ms" in summary
    assert "2.50x / 3.00x" in summary
    assert "2.2 / 2.5 s" in summary
    throughput = report.throughput_table(results)
    assert "| 10 " in throughput and "0.25x" in throughput and "150 MB" in throughput
    targets = report.targets_table(results)
    assert "2.50x" in targets and "**not met**" in targets
    assert "2.50 s (limit 4.0 s)" in targets
    assert "150.0 ms" in targets
    assert targets.count("| met") == 3
    assert "not measured" in targets  # no figure under load in this data
    text = report.full_report(results)
    assert "2 cores (test cpu)" in text
    profile = report.profile_table({"steps_per_second": 10.0}, {"steps_per_second": 15.0})
    assert "1.50x" in profile


def test_bench_modules_import_and_script_the_model() -> None:
    assert bare.BARE_WORKFLOW == "BenchBare"
    reply = ours.responder({"messages": [{"role": "user", "content": "bench: 3 steps"}]})
    calls = reply.body["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == [ours.NOOP_TOOL] * 3
    done = ours.responder(
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
    )
    assert done.body["choices"][0]["message"]["content"].startswith("## Summary")
    assert ours.run_spec(4).task == "bench: 4 steps"
    assert "FOR UPDATE SKIP LOCKED" in pg_queue.CLAIM
