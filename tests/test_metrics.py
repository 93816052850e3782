"""`stats` over a hand-built fleet: every figure equals a count made by hand below."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from agentledger.cli import render
from agentledger.store import metrics
from tests.mirror_seed import Seeder, fresh_database, starter
from tests.support import rows

S, F, R = "succeeded", "failed", "running"

# Runs started yesterday: (run, status, seconds to finish or None while live, cost).
RUNS = [
    ("r1", "completed", 60, 0.010),
    ("r2", "completed", 120, 0.020),
    ("r3", "completed", 300, 0.030),
    ("r4", "failed", 30, 0.005),
    ("r5", "cancelled", 600, 0.001),
    ("r6", "running", None, 0.002),
]

# (run, step, type, name, status, attempt statuses in order, seconds the step took)
STEPS = [
    # r1: a tool retry; an approval after 40s; send_message's attempt 1 never reported (its
    # worker died) and attempt 2 did: a lost attempt, so r1 was recovered.
    ("r1", "m-1", "model_call", "gpt-x", "completed", (S,), 1),
    ("r1", "t-2", "tool_call", "search_notes", "completed", (F, S), 1),
    ("r1", "a-3", "approval", "send_message", "approved", (), 40),
    ("r1", "t-4", "tool_call", "send_message", "completed", (R, S), 1),
    # r2: the model failed twice before answering; an approval after 100s.
    ("r2", "m-1", "model_call", "gpt-x", "completed", (F, F, S), 1),
    ("r2", "a-2", "approval", "send_message", "approved", (), 100),
    ("r2", "t-3", "tool_call", "send_message", "completed", (S,), 1),
    # r3: one approval rejected after 10s, one expired after an hour.
    ("r3", "m-1", "model_call", "gpt-y", "completed", (S,), 1),
    ("r3", "a-2", "approval", "send_message", "rejected", (), 10),
    ("r3", "a-3", "approval", "send_message", "expired", (), 3600),
    ("r3", "t-4", "tool_call", "create_ticket", "completed", (S,), 1),
    # r4: the model failed twice and the call gave up, failing the run.
    ("r4", "m-1", "model_call", "gpt-y", "failed", (F, F), 1),
    # r5: a tool failed twice; the run was cancelled while its approval waited (abandoned).
    ("r5", "t-1", "tool_call", "search_notes", "failed", (F, F), 1),
    ("r5", "a-2", "approval", "send_message", "abandoned", (), 1),
    # r6, live: its tool step lost attempt 1 and runs attempt 2; its model step's only
    # attempt is running now (the latest attempt, so not lost); an approval waits.
    ("r6", "t-1", "tool_call", "search_notes", "running", (R, R), None),
    ("r6", "m-2", "model_call", "gpt-x", "running", (R,), None),
    ("r6", "a-3", "approval", "send_message", "waiting", (), None),
]

# (run, step, tool, duplicates the ledger prevented)
LEDGER = [
    ("r1", "t-4", "send_message", 0),
    ("r2", "t-3", "send_message", 2),
    ("r3", "t-4", "create_ticket", 1),
]


async def seed_fleet(seed: Seeder, now: datetime) -> None:
    """The runs above, started yesterday, and one more started 40 days ago."""
    t = now - timedelta(days=1)
    for run_id, status, seconds, cost in RUNS:
        await seed.run(run_id, status, t, seconds=seconds, cost_usd=cost)
    for run_id, step_id, type, name, status, attempts, seconds in STEPS:
        await seed.step(
            run_id,
            step_id,
            type,
            name,
            status,
            started_at=t,
            seconds=seconds,
            final=seconds is not None,
            attempts=attempts,
            input={"kind": "action"},
        )
    for run_id, step_id, tool, duplicates in LEDGER:
        await seed.ledger(run_id, step_id, tool, duplicates=duplicates)
    # old: completed in 10s for $1.00; a model retry, a 5s approval, 5 duplicates prevented.
    old = now - timedelta(days=40)
    await seed.run("old", "completed", old, seconds=10, cost_usd=1.0)
    await seed.step(
        "old", "m-1", "model_call", "gpt-x", "completed", started_at=old, attempts=(F, S)
    )
    await seed.step("old", "a-2", "approval", "send_message", "approved", started_at=old, seconds=5)
    await seed.ledger("old", "m-1", "send_message", duplicates=5)


# Hand counts for the runs started in the last 7 days (r1..r6).
WEEK = {
    # Finished runs cost 0.010 + 0.020 + 0.030 + 0.005 + 0.001 = 0.066, for 3 completed.
    "cost_per_completed_run_usd": 0.066 / 3,
    "completed_run_cost_avg_usd": 0.060 / 3,
    "finished_cost_usd": 0.066,
    "cost_total_usd": 0.068,
    "runs_started": 6,
    "runs_finished": 5,
    "runs_completed": 3,
    "runs_failed": 1,
    "runs_cancelled": 1,
    "runs_live": 1,
    "completion_rate": 3 / 5,
    "failure_rate": 1 / 5,
    # Durations 30, 60, 120, 300, 600: the median is 120; p95 sits at 0.95 * 4 = 3.8, so
    # 300 + 0.8 * (600 - 300) = 540.
    "duration_median_seconds": 120.0,
    "duration_p95_seconds": 540.0,
    # Attempts after the first: r1 2, r2 2, r3 0, r4 1, r5 1, r6 1.
    "retries": 7,
    "retries_per_run": 7 / 6,
    "runs_retried": 5,
    # Superseded 'running' attempts: r1's send_message #1, r6's search_notes #1.
    "lost_attempts": 2,
    "runs_recovered": 2,
    "duplicates_prevented": 3,
    # Decided: 40s, 100s (approved), 10s (rejected); median 40, p95 at 0.95 * 2 = 1.9:
    # 40 + 0.9 * (100 - 40) = 94. r3's expired one is counted apart; r5's abandoned one and
    # r6's waiting one are neither.
    "approvals_decided": 3,
    "approvals_expired": 1,
    "approval_wait_median_seconds": 40.0,
    "approval_wait_p95_seconds": 94.0,
    # Ordered by failures (failed attempts + failed calls), then name.
    "tool_failures": [
        {"tool": "search_notes", "calls": 3, "failed_attempts": 3, "failed_calls": 1},
        {"tool": "create_ticket", "calls": 1, "failed_attempts": 0, "failed_calls": 0},
        {"tool": "send_message", "calls": 2, "failed_attempts": 0, "failed_calls": 0},
    ],
    "model_failures": [
        {"model": "gpt-y", "calls": 2, "failed_attempts": 2, "failed_calls": 1},
        {"model": "gpt-x", "calls": 3, "failed_attempts": 2, "failed_calls": 0},
    ],
    # Every seeded model is priced (tests/test_providers.py runs an unpriced one).
    "unpriced_model_calls": 0,
    "unpriced_models": [],
}

# All time adds the old run: 7 started, 6 finished, 4 completed.
ALL_TIME = {
    **WEEK,
    "cost_per_completed_run_usd": 1.066 / 4,
    "completed_run_cost_avg_usd": 1.060 / 4,
    "finished_cost_usd": 1.066,
    "cost_total_usd": 1.068,
    "runs_started": 7,
    "runs_finished": 6,
    "runs_completed": 4,
    "completion_rate": 4 / 6,
    "failure_rate": 1 / 6,
    # 10, 30, 60, 120, 300, 600: median (60 + 120) / 2 = 90; p95 at 4.75: 300 + 0.75 * 300.
    "duration_median_seconds": 90.0,
    "duration_p95_seconds": 525.0,
    "retries": 8,
    "retries_per_run": 8 / 7,
    "runs_retried": 6,
    "duplicates_prevented": 8,
    # 5, 10, 40, 100: median 25; p95 at 2.85: 40 + 0.85 * 60 = 91.
    "approvals_decided": 4,
    "approval_wait_median_seconds": 25.0,
    "approval_wait_p95_seconds": 91.0,
    "model_failures": [
        {"model": "gpt-x", "calls": 4, "failed_attempts": 3, "failed_calls": 0},
        {"model": "gpt-y", "calls": 2, "failed_attempts": 2, "failed_calls": 1},
    ],
}


def assert_figures(actual: dict[str, object], expected: dict[str, object]) -> None:
    for name, value in expected.items():
        if isinstance(value, float):
            assert actual[name] == pytest.approx(value), name
        else:
            assert actual[name] == value, name
    assert set(actual) - set(expected) == {"since"}, "every figure has a hand count"


async def test_stats_equal_hand_counts(database_url, tmp_path):
    now = datetime.now(UTC)
    async with fresh_database(database_url, "agentledger_metrics") as (url, pool):
        await seed_fleet(Seeder(pool), now)

        week = await metrics.stats(pool, since=now - timedelta(days=7))
        assert_figures(week.model_dump(mode="json"), WEEK)
        all_time = await metrics.stats(pool)
        assert all_time.since is None
        assert_figures(all_time.model_dump(mode="json"), ALL_TIME)

        # The all-time views say the same as `stats` without a window.
        tools = await rows(pool, "SELECT * FROM metrics_tool_failures ORDER BY tool")
        assert tools == sorted(ALL_TIME["tool_failures"], key=lambda t: t["tool"])
        models = await rows(pool, "SELECT * FROM metrics_model_failures ORDER BY model")
        assert models == sorted(ALL_TIME["model_failures"], key=lambda m: m["model"])
        lost = await rows(
            pool, "SELECT run_id, lost_attempts FROM metrics_runs WHERE lost_attempts > 0"
        )
        assert sorted((r["run_id"], r["lost_attempts"]) for r in lost) == [("r1", 1), ("r6", 1)]

        # The command line: the same figures as JSON, and a table that leads with cost.
        env = {"DATABASE_URL": url, "AGENTLEDGER_HOME": str(tmp_path)}
        code, out, err = await starter("stats", "--since", "7d", "--json", env=env)
        assert code == 0, err
        printed = json.loads(out)
        assert_figures(printed, WEEK)
        since = datetime.fromisoformat(printed["since"])
        assert abs((now - timedelta(days=7) - since).total_seconds()) < 120

        code, out, err = await starter("stats", env=env)
        assert code == 0, err
        assert out.startswith("agentledger stats: all runs\n\nCOST PER COMPLETED RUN  $0.266500")
        assert "failure rate          16.7% (failed / finished: what users see)" in out
        assert "search_notes   3      3                1" in out
        assert out.rstrip("\n") == render.stats_text(all_time)

        code, out, err = await starter("stats", "--since", "yesterday", env=env)
        assert code == 2 and "--since" in err and out == ""


async def test_stats_of_an_empty_mirror_has_no_rates(database_url):
    async with fresh_database(database_url, "agentledger_metrics") as (_, pool):
        empty = await metrics.stats(pool)
    assert empty.runs_started == 0 and empty.cost_total_usd == 0
    assert empty.cost_per_completed_run_usd is None and empty.completion_rate is None
    assert empty.duration_median_seconds is None and empty.tool_failures == []
    assert "COST PER COMPLETED RUN  -" in render.stats_text(empty)
