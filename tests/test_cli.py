"""The command line, end to end: `python starter.py ...` as a subprocess against the real stack.

The CLI runs in its own process with the test's settings in its environment, and an
in-process worker serves the test's task queue.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.results import RunResult
from agentledger.dev.stack import free_port
from agentledger.store.db import MIGRATIONS, schema_version
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import NOTIFY_TASK, make_spec, wait_mirrored_status, wait_pending

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli_env(settings: AgentLedgerConfig, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "OPENAI_BASE_URL": settings.openai_base_url or "",
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_PREPARED_STATEMENTS": "1" if settings.prepared_statements else "0",
        "AGENTLEDGER_HOME": str(home),  # no stack.json there: only the variables above count
    }


async def run_cli(
    settings: AgentLedgerConfig, home: Path, *args: str, seconds: float = 60, console: bool = False
) -> Result:
    env = cli_env(settings, home)
    # The `agentledger` console script (pyproject.toml) sits beside this interpreter.
    command = (
        [str(Path(sys.executable).parent / "agentledger")]
        if console
        else [sys.executable, "starter.py"]
    )
    proc = await asyncio.create_subprocess_exec(
        *command,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), seconds)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(
            f"`starter.py {' '.join(args)}` did not finish in {seconds}s"
        ) from None
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@pytest.fixture
def cli(settings: AgentLedgerConfig, tmp_path: Path) -> Any:
    home = tmp_path / "agentledger-home"

    async def call(*args: str) -> Result:
        return await run_cli(settings, home, *args)

    return call


def refused(result: Result, code: int = 2) -> str:
    """A refusal: its exit code (2 invalid input, 3 not found, 5 refused; README "Exit
    codes") and an `error: ...` message on stderr, no traceback."""
    assert result.code == code, (result.code, result.out, result.err)
    assert result.err.startswith("error: "), result.err
    assert "Traceback" not in result.err, result.err
    return result.err


async def test_cli_drives_a_run_from_start_to_receipt(cli, client, worker):
    key = f"cli-{uuid.uuid4().hex[:10]}"
    async with worker():
        first = await cli("start", "--task", NOTIFY_TASK, "--idempotency-key", key, "--json")
        assert first.code == 0, first.err
        started = first.json()
        run_id = started["run_id"]
        assert run_id == f"run-{key}"
        assert started["existing"] is False
        assert started["url"].endswith(f"/workflows/{run_id}")

        # The same key again names the same run, in JSON and in text, and starts nothing.
        again, again_text = await asyncio.gather(
            cli("start", "--task", NOTIFY_TASK, "--idempotency-key", key, "--json"),
            cli("start", "--task", NOTIFY_TASK, "--idempotency-key", key),
        )
        assert again.code == 0, again.err
        assert again.json()["run_id"] == run_id and again.json()["existing"] is True
        assert again_text.code == 0, again_text.err
        assert run_id in again_text.out and "already exists" in again_text.out

        await wait_pending(client, run_id)
        shown = await cli("status", run_id, "--json")
        assert shown.code == 0, shown.err
        state = shown.json()
        assert state["run_id"] == run_id
        assert state["status"] == "waiting_for_approval"
        assert state["steps"] and all(s["type"] and s["status"] for s in state["steps"])
        assert state["steps"][-1]["type"] == "approval"
        pending = state["pending_approval"]
        assert pending["tool"] == "send_message"
        assert pending["arguments"]["to"] == "ana@example.com"
        assert pending["required_role"] == "approver"

        # Refused decisions: a wrong role, and an edit that is not a JSON object.
        wrong_role, bad_edit = await asyncio.gather(
            cli("approve", run_id, "--by", "x", "--role", "wrong"),
            cli("approve", run_id, "--by", "x", "--role", "approver", "--edit", "[1]"),
        )
        message = refused(wrong_role, 5)  # refused by the run's policy
        assert "'approver'" in message and "'wrong'" in message
        assert "JSON object" in refused(bad_edit)

        # ... and they changed nothing: the same approval still waits.
        after = (await cli("status", run_id, "--json")).json()
        assert after["status"] == "waiting_for_approval"
        assert after["pending_approval"] == pending
        assert after["steps"] == state["steps"]

        approved = await cli("approve", run_id, "--by", "x", "--role", "approver", "--json")
        assert approved.code == 0, approved.err
        decision = approved.json()
        assert decision["decision"] == "approved"
        assert decision["approval_id"] == pending["approval_id"]

        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        result: RunResult = await asyncio.wait_for(handle.result(), 30)
        assert result.status.value == "completed"

        final = (await cli("status", run_id, "--json")).json()
        assert final["status"] == "completed" and final["pending_approval"] is None

    # Postgres reads and a refused control, all after the run ended (no worker needed).
    receipt_json, receipt_md, listed, paused = await asyncio.gather(
        cli("receipt", run_id, "--json"),
        cli("receipt", run_id),
        cli("list", "--json"),
        cli("pause", run_id),
    )
    assert receipt_json.code == 0, receipt_json.err
    receipt = receipt_json.json()
    assert receipt["run_id"] == run_id
    assert receipt["outcome"] == "completed"
    assert [(a["decision"], a["by"], a["role"]) for a in receipt["approvals"]] == [
        ("approved", "x", "approver")
    ]
    assert receipt["side_effects"][0]["arguments"]["to"] == "ana@example.com"

    assert receipt_md.code == 0, receipt_md.err
    assert receipt_md.out.startswith(f"# Receipt for {run_id}")
    assert "- **Outcome:** completed" in receipt_md.out
    assert "send_message: approved by x (approver)" in receipt_md.out

    assert listed.code == 0, listed.err
    mine = [r for r in listed.json() if r["run_id"] == run_id]
    assert len(mine) == 1 and mine[0]["status"] == "completed"

    assert "already ended" in refused(paused, 5)  # refused by the run


async def test_cli_refuses_bad_input_with_a_clear_error(cli, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("task: Summarize our invoice policy.\ncolour: blue\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("task: [unclosed\n")
    missing, no_task, unknown_field, no_file, bad_yaml, bad_edit = await asyncio.gather(
        cli("status", "run-does-not-exist"),
        cli("start"),
        cli("start", "--spec", str(spec)),
        cli("start", "--spec", str(tmp_path / "absent.yaml")),
        cli("start", "--spec", str(broken)),
        cli("approve", "run-does-not-exist", "--by", "x", "--edit", "{not json"),
    )
    message = refused(missing, 3)
    assert "no run" in message and "run-does-not-exist" in message
    message = refused(no_task)
    assert "invalid run spec" in message and "task" in message
    message = refused(unknown_field)
    assert "invalid run spec" in message and "colour" in message
    message = refused(no_file)
    assert "cannot read" in message and "absent.yaml" in message
    message = refused(bad_yaml)
    assert "not valid YAML" in message and "broken.yaml" in message
    assert "--edit is not valid JSON" in refused(bad_edit)


async def test_reads_never_migrate_and_migrate_brings_the_schema_up(settings, pool, tmp_path):
    """`list` on a database this code has not migrated says how to fix it and changes
    nothing; `migrate` brings the schema up, and running it again is a no-op."""
    name = f"fresh_{uuid.uuid4().hex[:10]}"
    async with pool.connection() as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    fresh = settings.model_copy(
        update={"database_url": make_conninfo(settings.database_url or "", dbname=name)}
    )
    home = tmp_path / "home"

    message = refused(await run_cli(fresh, home, "list"))
    assert "schema is at version 0" in message and "`agentledger migrate`" in message
    async with await psycopg.AsyncConnection.connect(fresh.database_url or "") as conn:
        assert await schema_version(conn) == 0, "a read must not migrate"

    for _ in range(2):
        migrated = await run_cli(fresh, home, "migrate", "--json")
        assert migrated.code == 0, migrated.err
        assert migrated.json() == {"schema_version": len(MIGRATIONS)}
    # Under a tenant of its own: `list` also shows the runs Temporal holds that the mirror
    # has not seen, and other tests' runs share this Temporal.
    listed = await run_cli(fresh, home, "list", "--json", "--tenant", f"t-{uuid.uuid4().hex}")
    assert listed.code == 0, listed.err
    assert listed.json() == []


async def test_the_agentledger_console_script_is_the_same_cli(settings, tmp_path):
    """`agentledger ...` runs the very command line `python starter.py ...` does."""
    home = tmp_path / "home"
    helps = [await run_cli(settings, home, "--help", console=flag) for flag in (True, False)]
    assert [h.code for h in helps] == [0, 0]
    assert helps[0].out.startswith("usage: agentledger ")
    assert helps[0].out == helps[1].out, "the same commands, flags and help"
    migrated = await run_cli(settings, home, "migrate", "--json", console=True)
    assert migrated.code == 0, migrated.err
    assert migrated.json() == {"schema_version": len(MIGRATIONS)}
    refused(await run_cli(settings, home, "receipt", "run-nonexistent", console=True), 3)


async def test_starter_py_with_a_task_starts_one_run_the_samples_way(cli, worker, pool):
    """`python starter.py "TASK"`: a Client with the plugin, one run started through the gate,
    its result awaited and printed, exit 0 for a completed run; the run is mirrored as any."""
    async with worker():
        done = await cli("Summarize our refund policy.")
    assert done.code == 0, (done.out, done.err)
    started, result = done.out.split("\n", 1)
    run_id = started.split()[1].rstrip(":")
    assert started.startswith("Started run-") and started.endswith(f"/workflows/{run_id}")
    assert result.startswith("Result: completed\n## Summary\nDone: Summarize our refund policy.")
    await wait_mirrored_status(pool, run_id, "completed")


async def test_starter_py_says_in_a_line_that_temporal_does_not_answer(settings, tmp_path):
    """Exit 4 (unreachable), what to do, no traceback; nothing was started."""
    nowhere = settings.model_copy(update={"temporal_address": f"127.0.0.1:{free_port()}"})
    done = await run_cli(nowhere, tmp_path / "home", "Summarize our refund policy.")
    assert done.code == 4, (done.out, done.err)
    assert done.err.startswith("error: Failed client connect") and "Traceback" not in done.err
    assert "(`python starter.py up`), or set TEMPORAL_ADDRESS" in done.err


def test_starter_py_reads_a_sentence_as_its_task_and_anything_else_as_a_command():
    """A mistyped command is named by the command line, never started as a task."""
    import starter

    assert not starter.is_command([])
    assert not starter.is_command(["Summarize our refund policy."])
    for argv in (["demo"], ["--help"], ["status", "run-1"], ["stauts"], ["start", "--task", "a b"]):
        assert starter.is_command(argv), argv


async def test_spec_file_with_flags_overriding_it_starts_that_run(cli, client, tmp_path):
    """A valid spec file starts a run with its fields; flags win over the file."""
    key = f"spec-{uuid.uuid4().hex[:10]}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "task: Summarize our invoice policy.\n"
        "tenant: acme\n"
        "user: from-file\n"
        "allowed_tools: [search_notes]\n"
    )
    started = await cli(
        "start", "--spec", str(spec), "--user", "from-flag", "--idempotency-key", key, "--json"
    )
    assert started.code == 0, started.err
    run_id = started.json()["run_id"]
    assert run_id == f"run-acme~{key}", "the run's id is scoped by its tenant"
    handle = client.get_workflow_handle(run_id)
    try:
        spec_sent = (await handle.fetch_history()).events[0]
        attrs = spec_sent.workflow_execution_started_event_attributes
        sent = json.loads(attrs.input.payloads[0].data)
        assert sent["task"] == "Summarize our invoice policy."
        assert sent["tenant"] == "acme" and sent["user"] == "from-flag"
        assert sent["allowed_tools"] == ["search_notes"]
    finally:
        await handle.terminate("test done")  # no worker serves this queue


async def test_cli_exits_cleanly_when_many_run_at_once(cli):
    """Under load the Temporal client's threads could abort interpreter teardown (SIGABRT)."""
    results = await asyncio.gather(*(cli("status", "run-does-not-exist") for _ in range(8)))
    for result in results:
        assert "Fatal Python error" not in result.err, result.err
        assert "no run" in refused(result, 3)


async def test_cli_refuses_bounds_that_cannot_bound(cli):
    """A negative or NaN --wait, a --limit under 1 or a blank --reason is refused before
    anything is asked."""
    assert (await cli("migrate")).code == 0  # `reject` looks up approver keys first
    refusals = await asyncio.gather(
        cli("status", "run-any", "--wait", "-1"),
        cli("status", "run-any", "--wait", "nan"),
        cli("watch", "run-any", "--wait", "0"),
        cli("list", "--limit", "-1"),
        cli("list", "--limit", "0", "--json"),
        cli("reject", "run-any", "--by", "x", "--role", "approver", "--reason", " "),
    )
    for result in refusals:
        assert result.code == 2, (result.code, result.out, result.err)
        assert "Traceback" not in result.err, result.err
    assert "argument --wait: takes seconds above 0" in refusals[0].err
    assert "not 'nan'" in refusals[1].err
    assert "not '0'" in refusals[2].err
    assert "argument --limit: takes a whole number, 1 or more" in refusals[3].err
    assert "not '0'" in refusals[4].err
    assert "a rejection needs a reason (--reason TEXT)" in refused(refusals[5])


async def test_watch_says_within_its_wait_why_a_live_run_is_silent(cli, client, settings, tmp_path):
    """`watch --wait 1` on a live run no worker serves notes the silence after 1 s, not 10."""
    assert (await cli("migrate")).code == 0  # no worker here to migrate the database
    started = await ops.start_run(client, make_spec("anything"), task_queue=settings.task_queue)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "watch",
        started.run_id,
        "--wait",
        "1",
        cwd=ROOT,
        env=cli_env(settings, tmp_path / "agentledger-home"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        said = ""
        while "note:" not in said:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, f"watch ended without a note: {said}"
            said += line
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    assert f"nothing from {started.run_id} for 1s" in said, said


async def test_status_shows_control_characters_escaped_not_obeyed(cli, worker, tmp_path):
    """A task carrying terminal escapes (clear the screen, retitle the window) is shown as
    text by `status`; `--json` keeps it exact."""
    task = "Summarize \x1b[2J\x1b]0;owned\x07 the policy."
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": task}))
    async with worker():
        started = await cli("start", "--spec", str(spec), "--json")
        assert started.code == 0, started.err
        run_id = started.json()["run_id"]
        shown, exact = await asyncio.gather(cli("status", run_id), cli("status", run_id, "--json"))
    assert shown.code == 0, shown.err
    assert "\x1b" not in shown.out and "\x07" not in shown.out
    assert "Summarize \\x1b[2J\\x1b]0;owned\\x07 the policy." in shown.out
    assert exact.json()["task"] == task
