"""docs/your-agent.md as a reader follows it: every code block of the page, run as written on
the shared test stack (its Temporal, Postgres and offline model, through the variables
`agentledger up` would provide), or listed below with the reason it cannot run here.

The worker file runs as its first line says, in the checkout's folder, until the script has
done; the script runs once the worker serves, and what it prints is what the page says."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from agentledger.store import tool_sets
from tests.support import eventually, rows
from tests.test_cli import cli_env

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "your-agent.md"
# Blocks not run here, by how their first line begins, with the reason.
NOT_RUN = {
    "apt-get install docker.io debootstrap": "installs Debian packages and needs a Docker engine "
    "of its own; tests/test_sandbox.py runs `sandbox build` on the session's engine and serves "
    "run_code from a worker started with `--sandbox`",
}


def blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks: (language, text)."""
    return re.findall(r"```(\w+)\n(.*?)```", PAGE.read_text(), re.S)


def as_typed(block: str) -> tuple[str, str]:
    """A Python block's file name and the command its first line says runs it."""
    first = block.splitlines()[0]
    found = re.match(r"# (\S+\.py): .*`([^`]+)`", first)
    assert found, f"a Python block names its file and its command: {first}"
    return found[1], found[2]


def test_every_block_is_run_or_listed_with_its_reason() -> None:
    firsts = [text.splitlines()[0] for _, text in blocks()]
    gone = [start for start in NOT_RUN if not any(f.startswith(start) for f in firsts)]
    assert not gone, f"NOT_RUN names blocks that are gone: {gone}"
    run = [f for f in firsts if not any(f.startswith(start) for start in NOT_RUN)]
    assert [as_typed(text)[0] for _, text in blocks() if text.splitlines()[0] in run] == [
        "my_worker.py",
        "refund.py",
    ]


async def shell(command: str, env: dict[str, str], seconds: float) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", command, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), seconds)
    assert process.returncode is not None
    return process.returncode, out.decode()


# Two Python processes (a worker, a client) and a run with an approval: about 20 s.
@pytest.mark.timeout(240)
async def test_the_python_files_run_as_written(settings, pool, tmp_path) -> None:
    files = dict(as_typed(text) for language, text in blocks() if language == "python")
    for language, text in blocks():
        if language == "python":
            (tmp_path / as_typed(text)[0]).write_text(text)
    env = cli_env(settings, tmp_path / "home")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    # A stopping worker lets a step in hand finish for up to 30 s by default; the test stops
    # its worker within the bound below whatever a loaded machine left in hand.
    env["AGENTLEDGER_DRAIN_SECONDS"] = "5"
    # The files as the page has them, typed in the checkout's folder.
    worker_line, script_line = (
        command.replace(name, str(tmp_path / name)) for name, command in files.items()
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = await asyncio.create_subprocess_exec(
            "bash", "-c", worker_line, cwd=ROOT, env=env, stdout=log, stderr=log,
            start_new_session=True,  # its own process group: stopped whole, as Ctrl-C would
        )  # fmt: skip
    try:
        await eventually(
            lambda: tool_sets.served_tools(pool, settings.task_queue),
            seconds=60,
            what=f"the worker to serve:\n{log_path.read_text()}",
        )
        code, out = await shell(script_line, env, seconds=120)
    finally:
        # Stopped as the page says, with Ctrl-C; the page's promise is what the files do, so a
        # worker slow to drain on a loaded machine is stopped outright, not waited for.
        if worker.returncode is None:
            os.killpg(worker.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(worker.wait(), 30)
        except TimeoutError:
            os.killpg(worker.pid, signal.SIGKILL)
            await worker.wait()
    assert code == 0, f"{out}\nthe worker said:\n{log_path.read_text()}"
    assert out.splitlines() == [
        "run-refund-7 waits for approval of refund",
        "run-refund-7 completed: agent refunds, 1 side effect",
    ], out
    refunded = await rows(
        pool, "SELECT order_id, cents FROM refunds WHERE run_id = %s", "run-refund-7"
    )
    assert refunded == [{"order_id": 7, "cents": 500}]
