"""`demo` and `up` start beside other software: a default port another program holds moves to
a free one (said), a busy port the user gave is refused with a flag that avoids it, and each
piece of advice works when followed."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from agentledger.core.constants import TEMPORAL_PORT, WEB_UI_PORT
from agentledger.dev.stack import free_port
from tests.test_demo_command import ROOT, clean_env, stop_leftover_postgres

HOLD = """
import socket, sys, time
held = []
for port in map(int, sys.argv[1:]):
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        continue  # already held by something else: busy either way
    sock.listen()
    held.append(sock)
print("holding", flush=True)
time.sleep(600)
"""


@asynccontextmanager
async def another_program_holding(*ports: int) -> AsyncIterator[None]:
    """A process that is not agentledger listening on `ports` (as another Temporal or app would)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD, *map(str, ports), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), 20) == b"holding\n"
        yield
    finally:
        holder.kill()
        await holder.wait()


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh AGENTLEDGER_HOME outside pytest's own temporary tree, which another pytest
    session may close to others meanwhile (the embedded Postgres runs as its own user)."""
    folder = Path(tempfile.mkdtemp(prefix="agentledger-home-"))
    try:
        yield folder / "fresh-home"
    finally:
        stop_leftover_postgres(folder / "fresh-home" / "pg")
        shutil.rmtree(folder, ignore_errors=True)


def cli_env(home: Path) -> dict[str, str]:
    return clean_env() | {"AGENTLEDGER_HOME": str(home)}


async def cli(home: Path, *args: str, bound: float = 100) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "starter.py"),
        *args,
        cwd=home.parent,
        env=cli_env(home),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), bound)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_demo_passes_with_the_default_ports_held_by_another_program(home):
    async with another_program_holding(TEMPORAL_PORT, WEB_UI_PORT):
        code, output = await cli(home, "demo", bound=110)
    assert code == 0, output
    assert "receipt: completed" in output, output
    moved = re.search(
        rf"port {TEMPORAL_PORT} is in use by another program: Temporal takes (\d+)", output
    )
    assert moved, output
    ui = re.search(
        rf"port {WEB_UI_PORT} is in use by another program: the Web UI takes (\d+)", output
    )
    assert ui, output
    assert f"Web UI: http://localhost:{ui.group(1)}/namespaces/default/workflows/" in output


async def test_a_busy_port_given_is_refused_with_advice_that_works(home):
    busy = free_port()
    async with another_program_holding(busy):
        code, output = await cli(home, "up", "--no-worker", "--port", str(busy), bound=60)
        assert code == 2, output
        advice = re.search(r"`(--port \d+)`", output)
        assert advice and f"port {busy} is already in use" in output, output

        # Followed as written, the advice starts the stack.
        up = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "starter.py"),
            "up",
            "--no-worker",
            *advice.group(1).split(),
            cwd=home.parent,
            env=cli_env(home),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert up.stdout is not None
            seen = ""
            while "Ctrl-C stops everything" not in seen:
                line = await asyncio.wait_for(up.stdout.readline(), 90)
                assert line, seen
                seen += line.decode()
            assert f"temporal_address: 127.0.0.1:{advice.group(1).split()[1]}" in seen, seen
            # The HTTP door serves beside the stack, at the URL it printed.
            door = re.search(r"http_url: (\S+)", seen)
            assert door, seen
            async with httpx.AsyncClient(timeout=30) as http:
                assert (await http.get(f"{door.group(1)}/healthz")).json() == {"ok": True}

            # A second `up` on the same home is refused, and its advice (use it) works.
            code, again = await cli(home, "up", "--no-worker", bound=60)
            assert code == 2 and "is already running" in again, again
            code, listed = await cli(home, "list", bound=60)
            assert code == 0, listed
        finally:
            if up.returncode is None:
                up.send_signal(signal.SIGINT)  # Ctrl-C, as `up` says
                try:
                    await asyncio.wait_for(up.wait(), 30)
                finally:
                    if up.returncode is None:
                        os.killpg(up.pid, signal.SIGKILL)
                        await up.wait()
        assert up.returncode == 0  # Ctrl-C is how `up` is meant to end
