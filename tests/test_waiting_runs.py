"""A run no worker has taken yet, through the CLI on the real stack with no worker running:
`start` warns that nothing polls its queue, `status` says it is queued and waiting for a
worker (exit 0), and `list` shows it to its tenant only, before the mirror has seen it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.service import RPCError

from tests.support import eventually
from tests.test_cli import cli_env, run_cli


# A dozen commands, then the advised worker's start and the run: minutes on a loaded machine.
@pytest.mark.timeout(300)
async def test_a_run_no_worker_has_taken_shows_as_waiting(settings, client, pool, tmp_path):
    home = tmp_path / "home"
    key = f"waits-{uuid.uuid4().hex[:8]}"
    started = await run_cli(
        settings, home, "start", "--task", "Say hello.", "--idempotency-key", key,
        "--tenant", "acme", "--json",
    )  # fmt: skip
    assert started.code == 0, started.err
    run_id = started.json()["run_id"]
    other = await run_cli(
        settings, home, "start", "--task", "Say hello.", "--idempotency-key", key,
        "--tenant", "globex", "--json",
    )  # fmt: skip
    other_id = other.json()["run_id"]
    try:
        warning = started.json()["no_worker_warning"]
        assert f"no worker polls task queue '{settings.task_queue}'" in warning, warning
        assert "agentledger-worker --demo" in warning and f"warning: {warning}" in started.err

        shown = await run_cli(settings, home, "status", run_id, "--wait", "5")
        assert shown.code == 0, shown.err
        assert f"waiting for a worker on queue {settings.task_queue} since" in shown.out
        assert f"run {run_id}: queued" in shown.out, shown.out

        as_json = await run_cli(settings, home, "status", run_id, "--json", "--wait", "5")
        assert as_json.code == 0, as_json.err
        state = as_json.json()
        assert (state["status"], state["source"], state["tenant"]) == ("queued", "temporal", "acme")
        assert state["task"] == "Say hello." and state["task_queue"] == settings.task_queue
        assert datetime.fromisoformat(state["waiting_since"])

        listed = await run_cli(settings, home, "list", "--tenant", "acme", "--json")
        assert listed.code == 0, listed.err
        rows = {row["run_id"]: row for row in listed.json()}
        assert rows[run_id]["status"] == "queued" and rows[run_id]["tenant"] == "acme"
        assert other_id not in rows, "another tenant's run is not listed"
        everyone = await run_cli(settings, home, "list", "--json")
        assert {run_id, other_id} <= {row["run_id"] for row in everyone.json()}

        # Another tenant's caller is told the run does not exist, as before.
        refused = await run_cli(settings, home, "status", run_id, "--tenant", "globex")
        assert refused.code == 3, (refused.out, refused.err)

        # The advice, followed as written, starts a worker that takes the run to its end.
        advised = re.search(r"start one with `([^`]+)`", warning)
        assert advised, warning
        log = tmp_path / "advised-worker.log"
        async with advice_followed(advised[1], cli_env(settings, home), log):

            async def completed() -> bool:
                done = await run_cli(settings, home, "status", run_id, "--json", "--wait", "5")
                return done.code == 0 and done.json()["status"] == "completed"

            try:
                await eventually(completed, seconds=150, what=f"{run_id} to complete")
            except AssertionError as err:
                said = log.read_text()
                raise AssertionError(f"{err}; the advised worker said:\n{said}") from err
    finally:
        for run in (run_id, other_id):
            with contextlib.suppress(RPCError):  # ended already
                await client.get_workflow_handle(run).terminate("test over")


@contextlib.asynccontextmanager
async def advice_followed(command: str, env: dict[str, str], log: Path) -> AsyncIterator[None]:
    """`command` typed into a shell (the console scripts beside this interpreter), running
    until the block ends, its output in `log`; then Ctrl-C."""
    bin_dir = str(Path(sys.executable).parent)
    with log.open("w") as out:
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,  # as typed (bash runs a lone command in its own place)
            env=env | {"PATH": os.pathsep.join([bin_dir, env.get("PATH", "")])},
            stdout=out,
            stderr=out,
        )
    try:
        yield
        assert process.returncode is None, f"`{command}` exited {process.returncode}"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            await asyncio.wait_for(process.wait(), 60)


async def test_list_leaves_out_the_engines_own_runs_unless_asked(settings, pool, tmp_path):
    """An eval's replayed cases and sub-agents are the engine's work: `list` shows the runs
    people started, `list --all` those too."""
    from agentledger.store.mirror_store import MirrorStore
    from tests.support import mirror_batch

    mark = uuid.uuid4().hex[:6]
    people = f"run-people-{mark}"
    engines = [f"run-~child.eval-default~e{mark}~case", f"run-~sub.run-people-{mark}~0003"]
    store = MirrorStore(pool)
    for run_id in [people, *engines]:
        await store.sync(mirror_batch(run_id, fence=1))
    home = tmp_path / "home"
    listed = await run_cli(settings, home, "list", "--json", "--limit", "500")
    assert listed.code == 0, listed.err
    shown = {row["run_id"] for row in listed.json()}
    assert people in shown and not shown & set(engines), shown
    everything = await run_cli(settings, home, "list", "--all", "--json", "--limit", "500")
    assert {people, *engines} <= {row["run_id"] for row in everything.json()}
