"""A worker your own script runs (`run_worker`) stops as `agentledger-worker` does: Ctrl-C
or SIGTERM drains it and it exits 0, also when a shell started it in the background, which
leaves SIGINT ignored so that Python's own Ctrl-C never comes."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from agentledger.store import tool_sets
from tests.support import eventually
from tests.test_cli import cli_env

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "import asyncio\n\nimport agentledger\n\nasyncio.run(agentledger.run_worker(demo=True))\n"


def ignoring_ctrl_c() -> None:
    """As `python my_worker.py &` in a shell script leaves it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
async def test_run_worker_drains_and_exits_on_a_stop_signal(settings, pool, tmp_path, sig):
    script = tmp_path / "my_worker.py"
    script.write_text(SCRIPT)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=ROOT, env=cli_env(settings, tmp_path / "home"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        preexec_fn=ignoring_ctrl_c,
    )  # fmt: skip
    try:
        await eventually(
            lambda: tool_sets.served_tools(pool, settings.task_queue),
            seconds=60,
            what="the worker to serve",
        )
        worker.send_signal(sig)
        out, _ = await asyncio.wait_for(worker.communicate(), 30)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    assert worker.returncode == 0, out.decode()
    assert "Traceback" not in out.decode(), out.decode()
