"""`agentledger eval`: recorded runs replayed to a candidate, on the real stack with the offline
model: divergences found where the prompt changed what the model calls, no side effect made
again, no false regression, and a gate whose exit code follows its thresholds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from agentledger.core._state import RunInput
from agentledger.core.eval_cases import (
    EvalCaseTask,
    EvalWorkflowInput,
    RecordedCall,
    case_key,
    eval_workflow_id,
    match,
    next_unused,
)
from agentledger.core.eval_reports import GATE_FAILED, EvalGate, EvalTotals, ratio
from agentledger.core.spec import RunSpec
from agentledger.profiles import load_agents
from agentledger.workflows.child_runs import child_run_id
from agentledger.workflows.evals import EvalWorkflow
from tests import client_ops as ops
from tests.support import NOTIFY_TASK, rows, run_result, wait_pending
from tests.test_cli import ROOT, cli_env, run_cli
from tests.test_crash_recovery import start_worker_process

TOOLS = ["search_notes", "fetch_page", "create_ticket"]
BASELINE = "You file a ticket for each request."
# The prompt change: on urgent tasks the offline model fetches a page instead of the notes.
SWAP = (
    'when the task mentions "urgent", call fetch_page {"url": "https://example.com/refunds"} '
    "instead of search_notes"
)
URGENT = {2, 5, 8}


def profiles(path: Path) -> Path:
    """desk (the baseline), desk-v2 (its prompt changed), desk-copy (the same, renamed)."""
    same = {
        "instructions": BASELINE,
        "tools": TOOLS,
        # A step a killed worker held is taken over quickly.
        "timeouts": {"heartbeat_seconds": 2, "initial_retry_seconds": 0.2},
    }
    path.write_text(
        yaml.safe_dump(
            {
                "desk": same,
                "desk-v2": {**same, "instructions": f"{BASELINE} {SWAP}."},
                "desk-copy": same,
                "mailer": {**same, "tools": ["search_notes", "send_message"]},
            }
        )
    )
    return path


def task(i: int) -> str:
    kind = "urgent" if i in URGENT else "routine"
    return (
        f'Request {i} ({kind}): call search_notes {{"query": "refund {i}"}} then call '
        f'create_ticket {{"title": "refund {i}", "body": "customer {i} asks for a refund"}}'
    )


async def record_runs(
    client: Any, settings: Any, agents_file: Path, worker: Any, count: int = 10
) -> list[str]:
    """Finished runs of the baseline profile, one per task."""
    desk = load_agents(str(agents_file))["desk"]
    tag = uuid.uuid4().hex[:8]
    async with worker():
        started = [
            await ops.start_run(
                client,
                desk.spec(task(i), idempotency_key=f"rec-{tag}-{i}"),
                task_queue=settings.task_queue,
            )
            for i in range(count)
        ]
        results = await asyncio.gather(*(run_result(client, s.run_id) for s in started))
    assert [r.status.value for r in results] == ["completed"] * count, results
    return [s.run_id for s in started]


async def eval_run(settings: Any, home: Path, *args: str, console: bool = False) -> Any:
    return await run_cli(settings, home, "eval", "run", *args, seconds=110, console=console)


async def test_eval_finds_exactly_the_changed_cases_and_makes_no_side_effect(
    client, settings, pool, worker, tmp_path
):
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker)
    (tmp_path / "runs.txt").write_text("\n".join(recorded) + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset), "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.json() == {"dataset": str(dataset), "cases": 10}
    written = yaml.safe_load(dataset.read_text())
    first = written["cases"][0]
    assert first["inputs"]["task"] == task(0)
    assert [c["tool"] for c in first["metadata"]["calls"]] == ["search_notes", "create_ticket"]

    ledger_before = await rows(pool, "SELECT idempotency_key FROM tool_ledger ORDER BY 1")
    async with worker():
        changed = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "desk-v2", "--json",
        )  # fmt: skip
        same = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "desk-copy", "--json", "--html", str(tmp_path / "same.html"),
        )  # fmt: skip
    assert changed.code == 0, changed.err
    report = changed.json()
    diverged = {c["name"]: c["divergence"] for c in report["cases"] if c["divergence"]}
    assert set(diverged) == {recorded[i] for i in URGENT}
    for name, divergence in diverged.items():
        baseline = next(c for c in report["cases"] if c["name"] == name)["baseline"]
        search = baseline["calls"][0]
        # The first tool call is the divergent one: the candidate's step 2, where the
        # recording called search_notes.
        assert divergence["step"] == search["seq"] == 2
        assert divergence["call"]["tool"] == "fetch_page"
        assert divergence["recorded"]["tool"] == "search_notes"
        assert divergence["recorded"]["arguments"] == search["arguments"]
    others = [c for c in report["cases"] if c["name"] not in diverged]
    assert len(others) == 7 and all(c["passed"] for c in others), others
    assert report["totals"]["passed"] == 7 and report["totals"]["diverged"] == 3

    # The tool ledger shows no new side effect: the candidates' create_ticket calls were
    # answered from the recording.
    assert await rows(pool, "SELECT idempotency_key FROM tool_ledger ORDER BY 1") == ledger_before
    eval_runs = [c["run_id"] for c in report["cases"]]
    assert await rows(pool, "SELECT 1 FROM tool_ledger WHERE run_id = ANY(%s)", eval_runs) == []

    # No false regression: the same profile scores as the recording did, case by case.
    assert same.code == 0, same.err
    identical = same.json()
    assert identical["totals"]["passed"] == 10 and identical["totals"]["diverged"] == 0
    for case in identical["cases"]:
        assert case["passed"] and all(case["assertions"].values()), case
        base, cand = case["baseline"], case["candidate"]
        assert [(c["tool"], c["arguments"], c["output"]) for c in cand["calls"]] == [
            (c["tool"], c["arguments"], c["output"]) for c in base["calls"]
        ]
        assert (cand["answer"], cand["tokens"]) == (base["answer"], base["tokens"])
    page = (tmp_path / "same.html").read_text()
    assert "<svg" in page and "gate passed" in page
    # The chart says what it shows: its axes and a legend of its colours.
    assert ">tokens</text>" in page and "cases (dot: passed or failed)" in page, page
    assert all(f">{name}</text>" in page for name in ("baseline", "candidate", "passed", "failed"))


async def test_the_gate_exit_code_follows_the_thresholds(client, settings, pool, worker, tmp_path):
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker)
    (tmp_path / "runs.txt").write_text("\n".join(recorded[:4]) + "\n")
    dataset = tmp_path / "cases.json"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    assert len(json.loads(dataset.read_text())["cases"]) == 4
    args = [str(dataset), "--agents", str(agents_file), "--candidate", "desk-v2"]
    async with worker():
        # Case 2 of 0..3 diverges: 3 of 4 pass.
        lenient = await eval_run(settings, tmp_path, *args, "--min-pass-rate", "0.75", console=True)
        strict = await eval_run(settings, tmp_path, *args, "--min-pass-rate", "0.8", console=True)
        costly = await eval_run(
            settings, tmp_path, *args, "--json", "--max-token-ratio", "0.5", console=True
        )
        deploy = await run_cli(
            settings, tmp_path, "deploy", "check", "--eval", *args, "--min-pass-rate", "0.8",
            "--json", seconds=110, console=True,
        )  # fmt: skip
    assert lenient.code == 0, lenient.err
    assert "gate passed" in lenient.out
    assert strict.code == GATE_FAILED, strict.err
    assert "gate FAILED: pass rate 75% < 80%" in strict.out
    assert costly.code == GATE_FAILED, costly.err
    assert costly.json()["gate_failures"] == [
        f"token ratio {costly.json()['totals']['token_ratio']:.2f} > 0.50"
    ]
    # deploy check --eval: the code replays, the new prompt fails the gate.
    assert deploy.code == GATE_FAILED, deploy.err
    both = deploy.json()
    assert both["replay"]["passed"] is True
    assert both["eval"]["gate_failures"] == ["pass rate 75% < 80%"]


async def test_a_worker_killed_mid_eval_loses_nothing_and_pays_for_nothing_twice(
    client, settings, pool, worker, model_server, tmp_path
):
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker, count=4)
    (tmp_path / "runs.txt").write_text("\n".join(recorded) + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    # One case at a time: the kill lands in a tool, with no other case's model call in
    # flight (a request cut off mid-flight is asked again; an answered one never is).
    args = [str(dataset), "--agents", str(agents_file), "--candidate", "desk-copy", "--json"]
    args += ["--concurrency", "1"]
    asked_before = len(model_server.requests)
    # This worker dies (SIGKILL) as it answers the first create_ticket of any case.
    doomed = await start_worker_process(settings, "doomed", faults="tool.before_run:create_ticket")
    evaluating = asyncio.create_task(eval_run(settings, tmp_path, *args))
    try:
        assert await asyncio.wait_for(doomed.wait(), 60) == -signal.SIGKILL
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
    assert not evaluating.done(), "the eval waits for a worker, it does not give up"
    async with worker():
        done = await evaluating
        again = await eval_run(settings, tmp_path, *args)
    assert done.code == 0, done.err
    report = done.json()
    assert sorted(c["name"] for c in report["cases"]) == sorted(recorded), "each case once"
    assert report["totals"]["passed"] == 4, report
    eval_runs = [c["run_id"] for c in report["cases"]]
    assert len(set(eval_runs)) == 4
    cases = await rows(pool, "SELECT run_id FROM eval_cases WHERE run_id = ANY(%s)", eval_runs)
    assert len(cases) == 4

    # No model call paid twice: no request was sent twice, and the re-run sent none.
    asked = [
        json.dumps(r["messages"], sort_keys=True) for r in model_server.requests[asked_before:]
    ]
    assert len(asked) == len(set(asked)), "a model call was paid for twice"
    assert again.code == 0, again.err
    assert len(model_server.requests) == asked_before + len(asked)
    assert again.json()["cases"] == report["cases"]


async def test_an_eval_whose_command_is_killed_goes_on_and_a_rerun_finishes_each_case_once(
    client, settings, pool, worker, model_server, tmp_path
):
    """The eval is its own workflow: the `eval run` command killed mid-wait, its cases still
    run to their ends (the divergent one ended where it diverged), and the command run again
    attaches to the same eval and scores it."""
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker, count=4)
    (tmp_path / "runs.txt").write_text("\n".join(recorded) + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    args = [str(dataset), "--agents", str(agents_file), "--candidate", "desk-v2", "--json"]
    asked_before = len(model_server.requests)
    case_runs = """SELECT e.run_id, r.status FROM eval_cases e LEFT JOIN runs r USING (run_id)
                   WHERE e.case_name = ANY(%s) ORDER BY e.run_id"""
    async with worker():
        command = await asyncio.create_subprocess_exec(
            sys.executable, "starter.py", "eval", "run", *args, "--concurrency", "1",
            cwd=ROOT, env=cli_env(settings, tmp_path),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(600):  # until the first case's run works
                if any(r["status"] for r in await rows(pool, case_runs, recorded)):
                    break
                await asyncio.sleep(0.1)
            command.send_signal(signal.SIGKILL)
        finally:
            if command.returncode is None:
                command.kill()
            await command.wait()
        unfinished = [r for r in await rows(pool, case_runs, recorded) if r["status"] is None]
        assert unfinished, "the command was killed before the eval started every case"
        # Without the command, the eval workflow runs every case to its end; the urgent one
        # (case 2) is ended where it diverged.
        ended = {"completed", "cancelled"}
        for _ in range(900):
            found = await rows(pool, case_runs, recorded)
            if all(r["status"] in ended for r in found):
                break
            await asyncio.sleep(0.1)
        statuses = sorted(str(r["status"]) for r in found)
        assert statuses == ["cancelled", "completed", "completed", "completed"], found
        again = await eval_run(settings, tmp_path, *args)
    assert again.code == 0, again.err
    report = again.json()
    assert sorted(c["name"] for c in report["cases"]) == sorted(recorded), "each case once"
    assert (report["totals"]["passed"], report["totals"]["diverged"]) == (3, 1), report
    (diverged,) = [c for c in report["cases"] if c["divergence"]]
    assert diverged["name"] == recorded[2] and diverged["candidate"]["outcome"] == "cancelled"
    assert sorted(c["run_id"] for c in report["cases"]) == [r["run_id"] for r in found]
    asked = [
        json.dumps(r["messages"], sort_keys=True) for r in model_server.requests[asked_before:]
    ]
    assert len(asked) == len(set(asked)), "a model call was paid for twice"


async def test_llm_judges_reach_their_model_through_agentledgers_providers(
    client, settings, pool, worker, model_server, tmp_path, monkeypatch
):
    """A dataset's LLMJudge without a model asks AGENTLEDGER_MODEL on the default client
    (OPENAI_BASE_URL); one naming `PROVIDER:MODEL` asks that provider of AGENTLEDGER_PROVIDERS,
    never pydantic-ai's default OpenAI."""
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker, count=2)
    (tmp_path / "runs.txt").write_text("\n".join(recorded) + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    written = yaml.safe_load(dataset.read_text())
    written["evaluators"] = [{"LLMJudge": {"rubric": 'The answer has "## Summary"'}}]
    written["cases"][1]["evaluators"] = [
        {"LLMJudge": {"rubric": 'The answer says "no such words"', "model": "judge:strict"}}
    ]
    dataset.write_text(yaml.safe_dump(written))
    judge = {"base_url": model_server.base_url, "headers": {"x-judge": "named"}}
    monkeypatch.setenv("AGENTLEDGER_PROVIDERS", json.dumps({"judge": judge}))
    asked_before = len(model_server.requests)
    async with worker():
        judged = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "desk-copy", "--json",
        )  # fmt: skip
    assert judged.code == 0, judged.err
    first, second = judged.json()["cases"]
    assert first["passed"] and first["assertions"]["LLMJudge"] is True, first
    assert not second["passed"], second
    assert sorted(second["assertions"][k] for k in second["assertions"] if "LLMJudge" in k) == [
        False,
        True,
    ], second
    grades = [
        (request["model"], headers.get("x-judge"))
        for request, headers in zip(
            model_server.requests[asked_before:],
            model_server.request_headers[asked_before:],
            strict=True,
        )
        if "You are grading output" in str(request["messages"][0]["content"])
    ]
    assert sorted(grades, key=str) == sorted(
        [(settings.model, None), (settings.model, None), ("strict", "named")], key=str
    )


async def test_an_eval_longer_than_its_batch_continues_as_new_and_runs_each_case_once(
    client, settings, pool, worker
):
    """The eval's state stays bounded: after each batch it continues as new with the cases
    left, never more than `concurrency` at once, and every case runs once."""
    cases = [EvalCaseTask(name=f"c{i}", task=f"Summarize the refunds, part {i}.") for i in range(5)]
    started = EvalWorkflowInput(
        eval_id=uuid.uuid4().hex[:12],
        candidate=RunSpec(task="-", allowed_tools=["search_notes"]),
        cases=cases,
        concurrency=2,
        batch=2,
        total=len(cases),
    )
    workflow_id = eval_workflow_id("default", started.eval_id)
    async with worker():
        handle = await client.start_workflow(
            EvalWorkflow.run, started, id=workflow_id, task_queue=settings.task_queue
        )
        most = 0
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            with contextlib.suppress(RPCError):  # between two runs of the eval
                most = max(most, len((await handle.query(EvalWorkflow.progress)).running))
            await asyncio.sleep(0.05)
        done = await client.get_workflow_handle_for(EvalWorkflow.run, workflow_id).result()
    assert (done.done, done.total, done.running) == (5, 5, [])
    assert 1 <= most <= 2
    expected = [child_run_id(workflow_id, case_key(started.eval_id, c.name)) for c in cases]
    runs = await rows(
        pool, "SELECT run_id, status FROM runs WHERE run_id = ANY(%s) ORDER BY run_id", expected
    )
    assert [r["run_id"] for r in runs] == sorted(expected)
    assert {r["status"] for r in runs} == {"completed"}
    chain = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(chain) == 3, "5 cases in batches of 2: two continuations"


async def test_live_read_only_runs_the_read_only_tool_past_a_divergence(
    client, settings, pool, worker, tmp_path
):
    agents_file = profiles(tmp_path / "agents.yaml")
    recorded = await record_runs(client, settings, agents_file, worker, count=3)
    (tmp_path / "runs.txt").write_text("\n".join(recorded) + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    ledger_before = await rows(pool, "SELECT idempotency_key FROM tool_ledger ORDER BY 1")
    async with worker():
        live = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "desk-v2", "--live-read-only", "--json",
        )  # fmt: skip
    assert live.code == 0, live.err
    urgent = next(c for c in live.json()["cases"] if c["name"] == recorded[2])
    assert urgent["divergence"]["stopped"] is False
    # fetch_page ran live; create_ticket, which the recording has, was answered from it.
    calls = urgent["candidate"]["calls"]
    assert [c["tool"] for c in calls] == ["fetch_page", "create_ticket"]
    assert calls[0]["output"]["url"] == "https://example.com/refunds"
    assert calls[1]["output"] == urgent["baseline"]["calls"][1]["output"]
    assert urgent["candidate"]["outcome"] == "completed" and not urgent["passed"]
    assert await rows(pool, "SELECT idempotency_key FROM tool_ledger ORDER BY 1") == ledger_before


async def test_approvals_are_decided_as_the_recording_decided_them(
    client, settings, pool, worker, tmp_path
):
    agents_file = profiles(tmp_path / "agents.yaml")
    mailer = load_agents(str(agents_file))["mailer"]
    async with worker():
        started = await ops.start_run(
            client,
            mailer.spec(NOTIFY_TASK, idempotency_key=f"mail-{uuid.uuid4().hex[:8]}"),
            task_queue=settings.task_queue,
        )
        await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="li", role="approver")
        ended = await run_result(client, started.run_id)
        assert ended.status.value == "completed", ended.error
    (tmp_path / "runs.txt").write_text(started.run_id + "\n")
    dataset = tmp_path / "cases.yaml"
    made = await run_cli(
        settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
        "-o", str(dataset),
    )  # fmt: skip
    assert made.code == 0, made.err
    outbox = await rows(pool, "SELECT id FROM outbox ORDER BY id")
    async with worker():
        replayed = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "mailer", "--json",
        )  # fmt: skip
    assert replayed.code == 0, replayed.err
    (case,) = replayed.json()["cases"]
    assert case["passed"] and case["assertions"]["SameApprovals"] is True, case
    assert [(a["tool"], a["decision"]) for a in case["candidate"]["approvals"]] == [
        ("send_message", "approved")
    ]
    assert await rows(pool, "SELECT id FROM outbox ORDER BY id") == outbox, "no message sent"


BAD_INPUT = [
    (["run", "{tmp}/absent.yaml", *"--agents {agents} --candidate desk".split()], "cannot read"),
    (["run", "{tmp}/garbage.yaml", *"--agents {agents} --candidate desk".split()], "not an eval"),
    (["run", "{tmp}/garbage.yaml", *"--agents {agents} --candidate nobody".split()], "'nobody'"),
    (["run", "{tmp}/garbage.yaml", *"--agents {agents} --candidate desk".split(),
      "--min-pass-rate", "2"], "min-pass-rate"),
    (["dataset", "--runs", "{tmp}/runs.txt", "-o", "{tmp}/x.yaml"], "run-no-such-run"),
    (["dataset", "-o", "{tmp}/cases.txt"], ".yaml or .json"),
    (["dataset", "-o", "{tmp}/garbage.yaml/cases.yaml"], "cannot write"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), BAD_INPUT)
async def test_bad_input_is_refused_with_a_reason(settings, pool, tmp_path, args, says):
    """Refused at once, exit 2, with what to fix (`pool`: a migrated database)."""
    agents_file = profiles(tmp_path / "agents.yaml")
    (tmp_path / "garbage.yaml").write_text("cases: 3\n")
    (tmp_path / "runs.txt").write_text("run-no-such-run\n")
    args = [a.format(tmp=tmp_path, agents=agents_file) for a in args]
    refused = await run_cli(settings, tmp_path, "eval", *args, "--json")
    assert refused.code == 2, (args, refused.err)
    assert says in json.loads(refused.err)["error"]["message"], (args, refused.err)


def test_identical_calls_are_answered_in_turn_and_arguments_are_normalized():
    calls = [
        RecordedCall(seq=2, tool="search_notes", arguments={"query": "a"}, output=1),
        RecordedCall(seq=4, tool="search_notes", arguments={"query": "a"}, output=2),
        RecordedCall(seq=6, tool="create_ticket", arguments={"title": "t", "body": "b"}),
    ]
    assert match(calls, set(), "search_notes", {"query": " a "}) == 0
    assert match(calls, {0}, "search_notes", {"query": "a"}) == 1
    assert match(calls, {0, 1}, "search_notes", {"query": "a"}) is None
    assert match(calls, set(), "create_ticket", {"body": "b", "title": "t"}) == 2
    assert match(calls, set(), "fetch_page", {"query": "a"}) is None
    assert next_unused(calls, {0}) == calls[1]


def test_the_gate_names_each_threshold_missed():
    totals = EvalTotals(
        cases=4, passed=3, pass_rate=0.75, diverged=1, baseline_tokens=100,
        candidate_tokens=150, baseline_cost_usd=0.0, candidate_cost_usd=0.0,
        cost_ratio=ratio(0.0, 0.0), token_ratio=ratio(150, 100),
    )  # fmt: skip
    assert totals.cost_ratio == 1.0 and ratio(1.0, 0.0) == float("inf")
    assert EvalGate(min_pass_rate=0.75, max_token_ratio=1.5, max_diverged=1).failures(totals) == []
    assert EvalGate(min_pass_rate=0.8, max_token_ratio=1.2, max_diverged=0).failures(totals) == [
        "pass rate 75% < 80%",
        "token ratio 1.50 > 1.20",
        "1 case(s) diverged > 0",
    ]


async def test_an_eval_runs_the_candidate_with_its_sub_agents(
    client, settings, pool, worker, tmp_path
):
    """`eval run --candidate lead` runs lead as a run of it would be: with its sub-agents
    (the profiles it was loaded with), offered as its tools `agent__NAME`."""
    agents_file = tmp_path / "agents.yaml"
    agents_file.write_text(
        yaml.safe_dump(
            {
                "lead": {"instructions": BASELINE, "tools": TOOLS, "subagents": ["helper"]},
                "helper": {"instructions": "You help.", "tools": ["search_notes"]},
            }
        )
    )
    lead = load_agents(str(agents_file))["lead"]
    async with worker():
        started = await ops.start_run(
            client,
            lead.spec(task(0), idempotency_key=f"lead-{uuid.uuid4().hex[:8]}"),
            task_queue=settings.task_queue,
        )
        assert (await run_result(client, started.run_id)).status.value == "completed"
        (tmp_path / "runs.txt").write_text(started.run_id + "\n")
        dataset = tmp_path / "cases.yaml"
        made = await run_cli(
            settings, tmp_path, "eval", "dataset", "--runs", str(tmp_path / "runs.txt"),
            "-o", str(dataset),
        )  # fmt: skip
        assert made.code == 0, made.err
        ran = await eval_run(
            settings, tmp_path, str(dataset), "--agents", str(agents_file),
            "--candidate", "lead", "--json",
        )  # fmt: skip
    assert ran.code == 0, ran.err
    eval_id = ran.json()["eval_id"]
    case = child_run_id(eval_workflow_id("default", eval_id), case_key(eval_id, started.run_id))
    history = await client.get_workflow_handle(case).fetch_history()
    [spec] = await client.data_converter.decode(
        history.events[0].workflow_execution_started_event_attributes.input.payloads,
        [RunInput],
    )
    assert set(spec.subagents) == {"helper"}, spec.subagents
