"""Ctrl-C at any moment of `up`, and two demos in one folder, as a person at a terminal meets
them: the console script in a process group of its own, interrupted as a terminal does (SIGINT
to the whole foreground group, so initdb hears it too).

Each scenario runs in a folder of its own, on free ports, one after another.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentledger.dev.stack import free_port, port_open, stack_owner

ROOT = Path(__file__).resolve().parent.parent
AGENTLEDGER = str(Path(sys.executable).parent / "agentledger")
CONFIG_VARS = ("TEMPORAL_ADDRESS", "DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
# The stack stops within 2 s of a Ctrl-C on an idle machine (its slowest part, the dev
# server, takes about 1 s); the bound leaves room for a machine loaded ten times over (seen:
# 13.9 s at a load of 13 on two cores).
STOP_BOUND = 20.0


def environment(home: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in CONFIG_VARS and not name.startswith("AGENTLEDGER_")
    }
    env["AGENTLEDGER_HOME"] = str(home)
    env["AGENTLEDGER_HTTP_PORT"] = "0"  # `up`'s HTTP door on a free port, not 8321
    return env


@dataclass
class Ended:
    code: int
    output: str
    stopped_in: float
    home: Path
    port: int


async def command(name: str, folder: Path, *args: str) -> tuple[asyncio.subprocess.Process, int]:
    port, ui_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        AGENTLEDGER,
        name,
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        *args,
        cwd=folder,
        env=environment(folder / "home"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
    )
    return process, port


async def ended(
    process: asyncio.subprocess.Process, folder: Path, port: int, interrupted_at: float
) -> Ended:
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 90)
    except TimeoutError:
        what = (
            "`up` exited, but something it started still holds its output"
            if process.returncode is not None
            else "`up` did not end"
        )
        raise AssertionError(f"{folder.name}: {what} 90 s after Ctrl-C") from None
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    assert process.returncode is not None
    return Ended(
        process.returncode, out.decode(), time.monotonic() - interrupted_at, folder / "home", port
    )


async def interrupted_up(folder: Path, after: float | None, twice: bool = False) -> Ended:
    """`up` interrupted `after` seconds in, or (None) once it serves."""
    process, port = await command("up", folder)
    assert process.stdout is not None
    seen = b""
    if after is None:
        async with asyncio.timeout(90):
            while b"polling" not in seen:
                line = await process.stdout.readline()
                assert line, seen.decode()
                seen += line
    else:
        await asyncio.sleep(after)
    os.killpg(process.pid, signal.SIGINT)
    at = time.monotonic()
    if twice:
        await asyncio.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
    run = await ended(process, folder, port, at)
    run.output = seen.decode() + run.output
    return run


def assert_everything_stopped(run: Ended) -> None:
    assert not port_open(run.port), f"Temporal still listens on {run.port}:\n{run.output}"
    assert not (run.home / "pg" / "postmaster.pid").exists(), "Postgres still runs"
    assert not (run.home / "stack.json").exists(), "stack.json outlived the stack"
    assert stack_owner(run.home) is None, "the folder is still held"


@pytest.mark.timeout(400)
async def test_ctrl_c_at_any_moment_of_up_stops_all_it_started_in_one_line():
    moments: list[float | None] = [0.3, 1, 1.5, 2, 3, None]
    with tempfile.TemporaryDirectory(prefix="agentledger-ctrl-c-") as top:
        folders = [Path(top) / f"at-{moment}" for moment in [*moments, "twice"]]
        for folder in folders:
            folder.mkdir()
        # One at a time: seven stacks starting at once on two cores, beside the rest of the
        # suite, put a moment like 0.3 s somewhere else in `up` on every run.
        runs = [
            *[await interrupted_up(f, m) for f, m in zip(folders, moments, strict=False)],
            await interrupted_up(folders[-1], None, twice=True),
        ]
        for moment, run in zip([*moments, "twice"], runs, strict=True):
            said = f"Ctrl-C at {moment}: exit {run.code} in {run.stopped_in:.1f}s\n{run.output}"
            # Once it served, Ctrl-C is how `up` is meant to end (exit 0); before, it is
            # an interruption (130).
            assert run.code == (0 if "polling" in run.output else 130), said
            assert run.stopped_in < STOP_BOUND, said
            assert "Traceback" not in run.output and "WARN" not in run.output, said
            lines = run.output.splitlines()
            assert lines[-1].startswith(("interrupted", "stopped; data kept in")), said
            # Before the worker served, the one line is all; after, the worker's own line
            # that it stopped comes before it.
            polling = [i for i, line in enumerate(lines) if "polling" in line]
            after_up = lines[polling[0] + 1 :] if polling else lines
            assert len(after_up) <= 2, said
            assert_everything_stopped(run)
        served = runs[moments.index(None)]
        assert served.output.splitlines()[-1] == f"stopped; data kept in {served.home.resolve()}"


@pytest.mark.timeout(200)
async def test_a_second_demo_a_second_after_the_first_is_refused_in_one_line():
    """The first demo owns the stack it starts and stops it when it ends: a second one in
    the same folder is refused at once (exit 5), naming it, and the first completes. (On a
    loaded machine the second may claim the folder first: then the first is refused.)"""
    with tempfile.TemporaryDirectory(prefix="agentledger-two-demos-") as top:
        folder = Path(top)
        first, port = await command("demo", folder)
        await asyncio.sleep(1)
        second, _ = await command("demo", folder)
        runs = await asyncio.gather(
            ended(first, folder, port, time.monotonic()),
            ended(second, folder, port, time.monotonic()),
        )
        both = "\n---\n".join(run.output for run in runs)
        assert sorted(run.code for run in runs) == [0, 5], both
        [completed] = [run for run in runs if run.code == 0]
        [refused] = [run for run in runs if run.code == 5]
        assert "receipt: completed" in completed.output, both
        [line] = refused.output.splitlines()
        home = folder / "home"
        assert line.startswith(f"error: the stack kept in {home} belongs to a demo"), line
        assert "AGENTLEDGER_HOME" in line, line
        assert_everything_stopped(completed)
