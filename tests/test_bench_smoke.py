"""The benchmark's pure helpers on fixed data, and the bare-agent baseline run for real.

Nothing here times anything: the real run checks the baseline does the work it claims
(the same model turns and tool steps as ours), not how fast.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from agentledger.core.constants import OFFLINE_MODEL
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.workflows.changes import for_new_run
from bench import (
    bare,
    bare_agent,
    compare_profiles,
    harness,
    http_stream,
    long_run,
    openai_agents_peer,
    ours,
    pg_queue,
    pydantic_ai_peer,
    report,
    scale_out,
    server_work,
    stats,
)
from bench import run as bench_run
from tests.conftest import SERVER_METRICS_PORT


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


def fixed_results() -> dict[str, object]:
    step = {"n": 3, "p50": 30.0, "p95": 40.0, "p99": 45.0}
    agent_step = {"n": 3, "p50": 20.0, "p95": 25.0, "p99": 30.0}
    bare_step = {"n": 3, "p50": 12.0, "p95": 14.0, "p99": 15.0}

    def level(n: int, ours_rate: float, agent_cpu: float) -> dict[str, object]:
        return {
            "level": n,
            "ours": {
                "steps_per_second": ours_rate,
                "rss_mb": 150,
                "worker_cpu_ms_per_step": 30.0,
                "gc_ms_per_step": 0.25,
            },
            "bare_agent": {
                "steps_per_second": 40.0,
                "worker_cpu_ms_per_step": agent_cpu,
                "gc_ms_per_step": 1.5,
            },
            "bare": {"steps_per_second": 80.0, "worker_cpu_ms_per_step": 6.0},
            "pgq": {"steps_per_second": 500.0},
        }

    return {
        "machine": {"nproc": 2, "cpu_model": "test cpu"},
        "overhead": {
            "steps": 20,
            "ours": {
                "isolated": {"step_ms": step, "wall_per_step_ms": step, "activities_per_run": 26}
            },
            "bare_agent": {
                "isolated": {
                    "step_ms": agent_step,
                    "wall_per_step_ms": agent_step,
                    "activities_per_run": 22,
                }
            },
            "bare": {"isolated": {"step_ms": bare_step, "wall_per_step_ms": bare_step}},
            "mirror_lag_ms": {"n": 5, "p50": 20.0, "p95": 150.0},
        },
        "throughput": {
            "steps_per_run": 5,
            "levels": [level(10, 20.0, 10.0), level(100, 36.0, 25.0)],
            "mirror_lag_under_load": {
                "level": 100,
                "ms": {"n": 5, "p50": 100.0, "p95": 250.0},
                "parts_ms": {
                    "accepted": {"n": 5, "p50": 40.0, "p95": 80.0},
                    "dispatched": {"n": 5, "p50": 50.0, "p95": 150.0},
                    "written": {"n": 5, "p50": 10.0, "p95": 20.0},
                },
            },
            "acceptance_lag_under_load": {
                "level": 100,
                "ours": {"n": 5, "p50": 60.0, "p95": 90.0},
                "bare_agent": {"n": 5, "p50": 50.0, "p95": 125.0},
            },
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


def test_report_from_fixed_results() -> None:
    results = fixed_results()
    summary = report.summary_table(results)
    assert "| 30.0 / 45.0 ms" in summary and "| 20.0 / 30.0 ms" in summary
    assert "1.50x / 1.50x" in summary  # ours ÷ bare agent, p50 / p99
    assert "2.50x / 3.00x" in summary  # ours ÷ bare activities
    assert "2.2 / 2.5 s" in summary
    # The lag under load, by part: accepted, the carrier dispatched, the rows written.
    assert "40.0 / 80.0 ms; 50.0 / 150.0 ms; 10.0 / 20.0 ms" in summary
    [activities] = [
        [cell.strip() for cell in line.split("|")[1:-1]]
        for line in summary.splitlines()
        if "activities scheduled per run" in line
    ]
    label = "activities scheduled per run, 20 tool steps"
    assert activities == [label, "26", "22", "—", "—", "1.18x", "—"]
    throughput = report.throughput_table(results)
    assert "| 10 " in throughput and "| 100 " in throughput
    assert "0.50x" in throughput and "0.25x" in throughput  # ÷ bare agent, ÷ bare activities
    assert "30.0 ms / 10.0 ms / 6.0 ms" in throughput and "3.00x" in throughput
    assert "150 MB / — / —" in throughput
    assert "0.25 ms / 1.50 ms / —" in throughput  # of which garbage collection
    text = report.full_report(results)
    assert "2 cores (test cpu)" in text
    profile = report.profile_table({"steps_per_second": 10.0}, {"steps_per_second": 15.0})
    assert "1.50x" in profile


PROMETHEUS = """# HELP persistence_latency persistence latency
persistence_latency_count{operation="UpdateWorkflowExecution",service_name="history"} 30
persistence_latency_count{operation="UpdateWorkflowExecution",service_name="frontend"} 10
persistence_latency_count{operation="CreateTasks",service_name="matching"} 4
persistence_latency_sum{operation="UpdateWorkflowExecution",service_name="history"} 0.5
client_latency_count{operation="HistoryClientRespondWorkflowTaskCompleted"} NaN
unrelated_total 7
"""


def test_the_server_s_counters_are_read_per_step_and_put_side_by_side() -> None:
    before = server_work.parse(PROMETHEUS)
    assert before[("persistence_latency_count", "UpdateWorkflowExecution")] == 40
    assert ("client_latency_count", "HistoryClientRespondWorkflowTaskCompleted") not in before
    after = {**before, ("persistence_latency_count", "UpdateWorkflowExecution"): 60.0}
    work = server_work.per_step(before, after, 10)
    assert work is not None and work["workflow_state_writes"] == 2.0
    assert work["tasks_stored_by_matching"] == 0.0
    assert server_work.per_step(None, after, 10) is None
    assert server_work.scrape(None) is None

    results = fixed_results()
    levels = results["throughput"]["levels"]  # type: ignore[index]
    for system, writes in (("ours", 6.5), ("bare_agent", 4.6), ("bare", 3.4)):
        row = levels[1][system]
        row["server_work_per_step"] = {**work, "workflow_state_writes": writes}
        row["temporal_cpu_ms_per_step"] = writes * 3.5
        row["history_events"] = 50
    table = report.server_work_table(results)
    assert table is not None
    [writes_line] = [line for line in table.splitlines() if "writes of a workflow" in line]
    assert [c.strip() for c in writes_line.split("|")[1:-1]] == [
        "writes of a workflow's state, per step",
        "6.50",
        "4.60",
        "3.40",
        "1.41x",
    ]
    assert "What the Temporal server did" in report.full_report(results)
    assert report.server_work_table(fixed_results()) is None  # a run without the counters


def test_targets_are_issue_15s_against_the_bare_agent() -> None:
    targets = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in report.targets_table(fixed_results()).splitlines()[2:]
    }
    step = targets["per-step p50 ≤ 1.25x bare agent, one run at a time"]
    assert step == ["30.0 ms", "20.0 ms", "1.50x", "**not met**"]
    assert targets["steps/s ≥ 0.8x bare agent, 10 concurrent runs"][2:] == ["0.50x", "**not met**"]
    assert targets["steps/s ≥ 0.8x bare agent, 100 concurrent runs"][2:] == ["0.90x", "met"]
    cpu = targets["worker CPU per step ≤ 1.5x bare agent, 100 concurrent runs"]
    assert cpu[2:] == ["1.20x", "met"]
    lag = targets[
        "mirror lag p95 ≤ 200 ms, 100 concurrent runs (bare agent: a step's acceptance by its "
        "run, the floor of any write after it)"
    ]
    assert lag == ["250.0 ms", "125.0 ms", "2.00x", "**not met**"]
    assert targets["mirror lag p95 ≤ 200 ms, one run at a time"][::3] == ["150.0 ms", "met"]
    assert targets["recovery p99 within the heartbeat timeout + 2 s"][-1] == "met"
    quick = fixed_results()
    quick["throughput"] = {"levels": quick["throughput"]["levels"][:1]}  # type: ignore[index]
    text = report.targets_table(quick)
    assert text.count("not measured") == 3  # steps/s, CPU and mirror lag at 100


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


def test_bare_agent_offers_the_model_our_tool_schema() -> None:
    ours_schema = [t.openai_schema() for t in ours.bench_registry().allowed([ours.NOOP_TOOL])]
    assert bare_agent.tool_schemas() == ours_schema


async def test_bare_agent_runs_the_same_loop_for_real(env: WorkflowEnvironment) -> None:
    """The bench's own worker process, the real `openai` client and the scripted model."""
    queue = harness.new_queue("smoke-agent")
    with OfflineModelServer(ours.responder) as model, tempfile.TemporaryDirectory() as home:
        worker_env = {
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": home,
        }
        metrics_url = f"http://127.0.0.1:{SERVER_METRICS_PORT}/metrics"
        async with harness.running(harness.bench_worker("bare_agent", queue, worker_env)) as w:
            workflow_id = f"{queue}-{uuid.uuid4().hex[:6]}"
            before = server_work.scrape(metrics_url)
            collected_before = await w.collector_totals()
            result = await env.client.execute_workflow(
                bare_agent.BareAgentWorkflow.run,
                bare_agent.AgentTask(task=ours.bench_task(3), model=OFFLINE_MODEL),
                id=workflow_id,
                task_queue=queue,
            )
            after = server_work.scrape(metrics_url)
            collected_after = await w.collector_totals()
    assert result == bare_agent.AgentResult(answer=ours.ANSWER, tool_steps=3, model_calls=2)
    # The dev server counts what it did under the names the bench reads (other tests share
    # the server, so at least this run's work).
    work = server_work.per_step(before, after, 1)
    assert work is not None
    assert work["activities"] >= 5 and work["workflow_tasks"] >= 5
    assert work["workflow_state_writes"] >= 10
    # The worker counts its time in garbage collection, which the bench reads around a level
    # (the bare agent keeps Python's collector as it comes: a run makes it collect).
    assert collected_before is not None and collected_after is not None
    assert collected_after[1] > collected_before[1]
    assert collected_after[0] > collected_before[0]
    times = await harness.run_times(env.client, workflow_id)
    assert [a.name for a in times.activities] == [
        bare_agent.AGENT_MODEL,
        *[bare_agent.AGENT_TOOL] * 3,
        bare_agent.AGENT_MODEL,
    ]
    assert all(a.completed is not None and a.attempt == 1 for a in times.activities)


@pytest.mark.parametrize(
    ("kind", "workflow", "model_activity", "tool_activity"),
    [
        (
            "openai_agents",
            openai_agents_peer.PEER_WORKFLOW,
            openai_agents_peer.PEER_MODEL,
            openai_agents_peer.PEER_TOOL,
        ),
        (
            "pydantic_ai",
            pydantic_ai_peer.PEER_WORKFLOW,
            pydantic_ai_peer.PEER_MODEL,
            pydantic_ai_peer.PEER_TOOL,
        ),
    ],
)
async def test_each_peer_runs_the_same_agent_for_real(
    env: WorkflowEnvironment, kind: str, workflow: str, model_activity: str, tool_activity: str
) -> None:
    """The peer's own worker process (its plugin as its docs show), the real `openai` client
    and the scripted model: the same two model turns and three tool steps as ours, under the
    activity names the bench times."""
    queue = harness.new_queue(f"smoke-{kind}")
    with OfflineModelServer(ours.responder) as model, tempfile.TemporaryDirectory() as home:
        worker_env = {
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": home,
        }
        async with harness.running(harness.bench_worker(kind, queue, worker_env)):
            workflow_id = f"{queue}-{uuid.uuid4().hex[:6]}"
            answer = await env.client.execute_workflow(
                workflow, ours.bench_task(3), id=workflow_id, task_queue=queue, result_type=str
            )
        requests = list(model.requests)
    assert answer == ours.ANSWER
    assert len(requests) == 2
    offered = [t["function"]["name"] for t in requests[0]["tools"]]
    assert offered == [ours.NOOP_TOOL]
    times = await harness.run_times(env.client, workflow_id)
    assert [a.name for a in times.activities] == [
        model_activity,
        *[tool_activity] * 3,
        model_activity,
    ]
    assert all(a.completed is not None and a.attempt == 1 for a in times.activities)
    # A level cut short counts the steps each system did by the cut-off, from its history.
    first_step = times.activities[1].completed
    assert first_step is not None
    counted = [
        await harness.steps_completed(env.client, [workflow_id], tool_activity, until)
        for until in (first_step - 0.001, first_step, times.closed or first_step + 60)
    ]
    assert counted == [0, 1, 3]


def test_profiles_of_two_trees_combine_into_means_and_a_table(tmp_path) -> None:
    def result(name: str, steps: float, cpu: float, psycopg: float) -> str:
        path = tmp_path / f"{name}.json"
        profile = {
            "steps_per_second": steps,
            "runs_per_second": steps / 5,
            "worker_cpu_ms_per_step": cpu,
            "temporal_cpu_ms_per_step": 30.0,
            "rss_mb": 200.0,
            "top": {"inclusive_share": {"psycopg": psycopg}, "top_self": []},
        }
        path.write_text(
            json.dumps({"machine": {"load_average_at_start": [1, 1, 1]}, "profile": profile})
        )
        return str(path)

    out = tmp_path / "combined.json"
    compare_profiles.main(
        [
            "--before", result("b1", 10, 30, 0.2), result("b2", 20, 20, 0.3),
            "--after", result("a1", 30, 10, 0.1),
            "--out", str(out),
        ]
    )  # fmt: skip
    combined = json.loads(out.read_text())
    assert combined["before"]["steps_per_second"] == 15
    assert combined["before"]["worker_cpu_ms_per_step"] == 25
    assert combined["before"]["inclusive_share"] == {"psycopg": 0.25}
    assert combined["after"]["runs"] == 1 and combined["after"]["steps_per_second"] == 30
    table = compare_profiles.table(combined["before"], combined["after"])
    assert "| steps/s | 15.0 | 30.0 | 2.00x |" in table
    assert "| psycopg | 25% | 10% | |" in table


def test_a_profile_splits_each_sample_into_one_part_and_the_two_workers_read_side_by_side(
    tmp_path,
) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "main;run (a.py:1);execute (psycopg/cursor.py:2) 6\n"
        "main;run (a.py:1);create (openai/resources.py:3);send (httpx/_client.py:4) 3\n"
        "main;_handle_activation (x.py:5);encode_completion (temporalio/bridge/worker.py:6) 1\n"
        # A frame whose source text py-spy split over two lines: no count, not a sample.
        "main;run (a.py:1);check (b.py:2) if x in\n self._worker_level_failure_exception_types\n"
    )
    summary = bench_run.summarize_profile(raw)
    assert summary["samples"] == 10
    parts = summary["part_share"]
    assert parts[bench_run.PARTS[0][0]] == 0.6 and parts["model calls (openai, httpx)"] == 0.3
    assert sum(parts.values()) == pytest.approx(1.0) and parts[bench_run.OTHER_PART] == 0
    agent = {
        "worker_cpu_ms_per_step": 5.0,
        "top": {"part_share": {**parts, bench_run.PARTS[0][0]: 0.0}},
    }
    ours = {"level": 100, "worker_cpu_ms_per_step": 10.0, "top": summary, "bare_agent": agent}
    table = " ".join(report.profile_parts_table(ours).split())  # columns padded
    assert (
        "| worker CPU per step at 100 concurrent runs, by part | ours | bare agent | gap |" in table
    )
    assert f"| {bench_run.PARTS[0][0]} | 6.00 ms | 0.00 ms | 6.00 ms |" in table
    assert "| worker CPU per step | 10.00 ms | 5.00 ms | 5.00 ms |" in table
    assert "Where the worker's CPU goes" in report.full_report({"profile": ours})
    # The OpenAI Agents peer's worker, profiled in the same run, reads beside both.
    peer = {"worker_cpu_ms_per_step": 4.0, "top": agent["top"]}
    table = " ".join(report.profile_parts_table({**ours, "openai_agents": peer}).split())
    assert (
        "| ours | bare agent | ours minus bare agent | OpenAI Agents + Temporal | "
        "ours minus OpenAI Agents + Temporal |"
    ) in table
    assert "| worker CPU per step | 10.00 ms | 5.00 ms | 5.00 ms | 4.00 ms | 6.00 ms |" in table


def test_the_report_opens_with_ours_over_each_peer() -> None:
    def system(step: float, rate: float, cpu: float, history: int) -> dict[str, object]:
        return {
            "isolated": {
                "step_ms": {"n": 3, "p50": step},
                "wall_per_step_ms": {"n": 3, "p50": step},
            },
            "steps_per_second": rate,
            "worker_cpu_ms_per_step": cpu,
            "temporal_cpu_ms_per_step": cpu / 2,
            "history_bytes": history,
            "history_events": 40,
        }

    ours_ = system(20.0, 50.0, 10.0, 6_000)
    oa = system(25.0, 40.0, 12.0, 10_000)
    pyd = system(40.0, 30.0, 20.0, 20_000)
    results = {
        "overhead": {"ours": ours_, "openai_agents": oa, "pydantic_ai": pyd},
        "throughput": {
            "levels": [{"level": 100, "ours": ours_, "openai_agents": oa, "pydantic_ai": pyd}],
            "mirror_lag_under_load": {"level": 100, "ms": {"n": 5, "p95": 300.0}},
            "acceptance_lag_under_load": {"level": 100, "ours": {"n": 5, "p95": 200.0}},
        },
    }
    text = report.full_report(results)
    first = text.split("\n\n")[1]
    assert first.startswith("Ours ÷ each peer")
    steps = next(line for line in text.splitlines() if line.startswith("| steps/s, 100"))
    assert "1.25x" in steps and "1.67x" in steps, "ours ÷ OpenAI Agents, ÷ Pydantic AI"
    targets = report.peer_targets_table(results)
    assert "| 0.80x" in targets and "met" in targets  # per-step p50 20 ÷ the best peer's 25
    history = next(line for line in targets.splitlines() if "history bytes" in line)
    assert "0.60x" in history and "**not met**" not in history  # 6,000 ÷ 10,000 ≤ 1.0x
    lag = next(line for line in targets.splitlines() if "mirror lag" in line)
    assert "1.50x" in lag and "**not met**" not in lag


@pytest.mark.parametrize("system", long_run.SYSTEMS)
async def test_the_long_run_workload_runs_for_real_on_every_system(
    env: WorkflowEnvironment, database_url: str, system: str
) -> None:
    """The long-run workload, 20 pages: each system's own worker process, the real `openai`
    client and the scripted model, one page per model turn; its history read back from
    Temporal (ours over a continue-as-new chain, forced early here)."""
    pages = 20
    with OfflineModelServer(ours.responder) as model, tempfile.TemporaryDirectory() as home:
        worker_env = {
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "DATABASE_URL": database_url,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": home,
        }
        found = await long_run.measure(
            env.client, system, worker_env, {}, pages=pages, budget_seconds=90,
            history_events=100, marks_at=(10, 20),
        )  # fmt: skip
        requests = [r for r in model.requests if r.get("tools")]
    assert found["finished"] and found["steps_done"] == pages, found
    # The model saw the conversation grow: one call per page, the last with every page.
    assert len(requests) == pages + 1
    last = [m for m in requests[-1]["messages"] if m.get("role") == "tool"]
    assert len(last) == pages and all(ours.page_text(pages - 1)[:20] in str(m) for m in last[-1:])
    at = found["at_step"]
    assert set(at) == {"10", "20"} and at["20"]["chain_events"] > at["10"]["chain_events"]
    assert found["chain_bytes"] >= at["20"]["chain_bytes"] > at["10"]["chain_bytes"]
    assert found["rss_mb_peak"] > 0 and found["step_ms"]["first"] > 0
    grows = found["bytes_per_step"]["ratio"]
    if system == "ours":
        # Continued as new past 100 events: the chain sums its runs, each run stays small.
        assert found["runs_in_chain"] > 1
        assert at["20"]["run_bytes"] < at["20"]["chain_bytes"]
        assert found["largest_run_bytes"] < found["chain_bytes"]
    else:
        # Each model call carries the whole conversation in history: a step costs more and
        # more bytes.
        assert found["runs_in_chain"] == 1 and at["20"]["run_bytes"] == at["20"]["chain_bytes"]
        assert grows > 1.5, found["bytes_per_step"]
    table = report.long_run_table(
        {"pages": pages, "systems": [system], "marks": [10, 20], system: found}
    )
    assert f"yes, {pages} steps" in table and "step 20: history bytes" in table
    assert at["20"]["step_ms"] > 0 and len(found["steps"]) == pages


async def test_scale_out_runs_ours_on_one_and_two_worker_processes(
    env: WorkflowEnvironment, database_url: str
) -> None:
    """The scale-out stage, small: one and two worker processes of ours polling one queue,
    the real `openai` client and the scripted model; every run finishes and each row says
    its steps/s, its ratio to one process and the CPU it used."""
    with OfflineModelServer(ours.responder) as model, tempfile.TemporaryDirectory() as home:
        worker_env = {
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "DATABASE_URL": database_url,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": home,
        }

        async def start(workflow_id: str, queue: str) -> None:
            spec = for_new_run(ours.run_spec(2, key=workflow_id))
            await ours.start_run(env.client, spec, workflow_id, queue)

        found: dict[str, Any] = {}
        await scale_out.stage(
            found,
            env.client, worker_env, {}, start, processes=(1, 2), levels=(4,), steps=2,
            budget_seconds=90,
        )  # fmt: skip
    one, two = found["rows"]
    assert [(r["processes"], r["level"]) for r in (one, two)] == [(1, 4), (2, 4)]
    for row in (one, two):
        assert row["completed"] == 4 and row["steps_done"] == 8 and not row["timed_out"]
        assert row["steps_per_second"] > 0 and row["workers_cpu_ms_per_step"] > 0
        assert row["machine_cores_busy"] + row["machine_cores_idle"] > 0
    assert one["ratio_to_one_process"] == 1.0
    assert two["ratio_to_one_process"] == pytest.approx(
        two["steps_per_second"] / one["steps_per_second"]
    )
    table = report.scale_out_table(found)
    assert "| 4 " in table and "1.00x" in table


def test_long_run_figures_read_growth_per_step_from_a_chain() -> None:
    """Step k adds k KB and takes k ms: the last window against the first, the figures at
    each mark, and a chain of two runs summed."""
    marks, total = [], 0
    for k in range(1, 41):
        total += 1000 * k
        run = 0 if k <= 20 else 1
        marks.append(long_run.StepMark(k * (k + 1) / 2000, total, 10 * k, total, 10 * k, run))
    chain = long_run.ChainHistory(marks, [(100, 5), (200, 7)], "completed", None)
    found = long_run.figures(chain, (10, 40, 50), window=5)
    assert found["runs_in_chain"] == 2 and found["chain_bytes"] == 300
    assert found["chain_events"] == 12 and found["largest_run_bytes"] == 200
    assert set(found["at_step"]) == {"10", "40"}
    assert found["at_step"]["40"]["run_index"] == 1
    assert found["at_step"]["10"]["step_ms"] == pytest.approx(8.0)  # steps 6..10: mean 8 ms
    assert found["bytes_per_step"]["first"] == pytest.approx(4000)  # steps 2..6
    assert found["bytes_per_step"]["last"] == pytest.approx(38000)  # steps 36..40
    assert found["events_per_step"]["ratio"] == pytest.approx(1.0)
    assert found["step_ms"]["ratio"] == pytest.approx(38 / 4)
    assert len(found["steps"]) == 40 and found["steps"][0][0] == 0
    profile = {"worker_cpu_ms_per_step": 10.0, "top": {"part_share": {"a part": 1.0}}}
    stage = {"systems": ["ours", "bare_agent"], "ours": profile, "bare_agent": profile}
    table = report.long_run_profile(stage)
    assert table is not None and "over the long run" in table and "| a part" in table
    assert report.long_run_profile({"systems": ["ours"], "ours": {}}) is None


async def test_the_http_stream_bench_measures_the_door_for_real(
    env: WorkflowEnvironment, database_url: str, tmp_path
) -> None:
    """bench/http_stream.py's quick mode on the tests' Temporal and Postgres: its own worker
    and `agentledger serve`, real HTTP, every token of every run timed from the model's flush
    to the client, and ended runs' streams read back to back."""
    found = await http_stream.measure(
        http_stream.QUICK, env.client.service_client.config.target_host, database_url, tmp_path
    )
    assert found["errors"] == {}, found["errors"]
    for level in ("1", "2"):
        part = found["latency"][level]
        assert part["tokens_emitted"] == part["runs"] * http_stream.TOKENS
        # Each token reached its client, after the model flushed it.
        assert part["token_ms"]["n"] == part["tokens_emitted"]
        assert part["token_ms"]["min"] > 0 and part["first_token_ms"]["n"] == part["runs"]
        assert part["live_events_per_second"] > 0
    browser = found["browser"]
    assert "skipped" in browser or browser["token_ms"]["n"] == http_stream.TOKENS
    for clients in ("1", "2"):
        replay = found["replay"][clients]
        assert replay["clients"] == int(clients) and replay["streams"] >= int(clients)
        assert replay["events_per_second"] > 0
    text = http_stream.full_report({"machine": {"nproc": 2}, **found})
    assert "token → client p50 / p95" in text and "events/s delivered" in text


def test_the_stream_bench_puts_two_trees_side_by_side_with_the_targets() -> None:
    """`bench/http_stream.py --before REV`: each side's turns pooled (every latency sample,
    rates over all the time), side by side with their ratio, and issue 52's targets on this
    tree's figures; each turn's load average said."""

    def turn(token: float, first: float, load: float) -> dict[str, object]:
        level = {
            "runs": 2,
            "token_ms_samples": [token, token * 2],
            "first_token_ms_samples": [first],
            "live_events": 10,
            "wall_seconds": 2.0,
        }
        return {
            "load_average_at_start": [load, 0.0, 0.0],
            "latency": {"1": level, "10": {**level, "token_ms_samples": [token * 3]}},
            "replay": {"1": {"clients": 1, "seconds": 1.0, "streams": 2, "events": 100}},
        }

    sides = {
        "before": {"rev": "abc1234", "runs": [turn(250, 500, 3.0), turn(250, 500, 5.0)]},
        "after": {
            "rev": "this tree (HEAD def5678)",
            "runs": [turn(10, 40, 4.0), turn(30, 40, 6.0)],
        },
    }
    for side in sides.values():
        side.update(http_stream.pooled(side["runs"]))  # type: ignore[arg-type]
    assert sides["after"]["latency"]["1"]["token_ms"]["n"] == 4
    assert sides["after"]["latency"]["1"]["live_events_per_second"] == 20 / 4.0
    assert sides["after"]["replay"]["1"]["events_per_second"] == 100.0
    text = http_stream.full_report({"machine": {"nproc": 2}, "sides": sides})
    p50 = next(line for line in text.splitlines() if "1 run(s) at once: token → client p50" in line)
    assert "375.0" in p50 and "25.0" in p50 and "0.07x" in p50  # pooled p50s, after ÷ before
    assert "before 3.0, 5.0; this tree 4.0, 6.0" in text
    targets = text.split("Targets (issue 52), this tree:")[1]
    first = next(line for line in targets.splitlines() if "first token" in line)
    assert "40.0 ms" in first and "| met" in first
    ten = next(line for line in targets.splitlines() if "10 runs" in line)
    assert "60.0 ms" in ten and "**not met**" in ten
