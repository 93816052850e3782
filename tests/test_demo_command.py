"""`python starter.py demo` with nothing configured: it brings up the embedded stack, runs a
task through its approval gate to a receipt, and takes the stack down again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger.dev.stack import free_port, port_open

ROOT = Path(__file__).resolve().parent.parent
CONFIG_VARS = ("TEMPORAL_ADDRESS", "DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")


def stop_leftover_postgres(pgdata: Path) -> None:
    """If the demo left its Postgres running (a failed test), stop it: no process leaks."""
    pid_file = pgdata / "postmaster.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)  # fast shutdown
        except (ValueError, IndexError, ProcessLookupError):
            pass


def clean_env() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if name not in CONFIG_VARS and not name.startswith("AGENTLEDGER_")
    }


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    """A folder outside pytest's own: a pytest session started meanwhile makes its folder
    0700 again, and the embedded Postgres (run as another user) then cannot reach its data
    to stop, which it reports on stderr."""
    with tempfile.TemporaryDirectory(prefix="agentledger-demo-") as folder:
        yield Path(folder)


async def test_demo_runs_end_to_end_on_the_embedded_stack_and_stops_it(fresh_dir):
    tmp_path = fresh_dir
    port, ui_port = free_port(), free_port()
    while ui_port == port:
        ui_port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "starter.py"),
        "demo",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        cwd=tmp_path,
        env=clean_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a hung demo can be killed whole
    )
    home = tmp_path / ".agentledger"
    try:
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 110)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        output = out.decode()

        assert proc.returncode == 0, output
        # Quiet on a fresh home: agentledger's own lines, not initdb's output, the
        # SDK's shutdown notes or a platformdirs warning; stdout and stderr together.
        lines = output.splitlines()
        assert len(lines) <= 15, f"{len(lines)} lines:\n{output}"
        assert not [line for line in lines if "pgserver" in line or "Warning" in line], output
        assert "receipt: completed · 7 steps" in output, output
        assert "waiting for approval: send_message" in output, output
        assert (
            f"Web UI: http://localhost:{ui_port}/namespaces/default/workflows/run-demo-" in output
        )
        # The whole receipt is kept, where the demo said; initdb's output went to a log file.
        [kept] = (home / "receipts").glob("run-demo-*.md")
        assert f"the whole receipt: .agentledger/receipts/{kept.name}" in output, output
        assert "- **Outcome:** completed" in kept.read_text()
        assert "initdb" in (home / "postgres.log").read_text()

        assert (home / "temporal.db").exists(), "the demo kept Temporal's history in its home"
        assert not port_open(port), f"the Temporal dev server still listens on {port}"
        assert not port_open(ui_port), f"the Web UI still listens on {ui_port}"
        assert not (home / "stack.json").exists(), "stack.json outlived the stack"
        assert not (home / "pg" / "postmaster.pid").exists(), "the embedded Postgres still runs"
    finally:
        stop_leftover_postgres(home / "pg")
