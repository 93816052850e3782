"""Quiet by default, true always: other libraries are heard from WARNING up,
`--json` and `--log-level` are taken wherever they are typed, a stopping worker drains for its
grace period and says what became of its steps, and users see no project-maintenance text.

The demo's own line count is checked in tests/test_demo_command.py."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import agentledger.demo
from agentledger.core import version_branches
from agentledger.core.log_setup import configure_logging
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.tools import Tool, ToolContext, ToolRegistry
from tests import client_ops as ops
from tests.support import make_spec, scripted

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """What configure_logging writes, with the test runner's logging put back after."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield io.StringIO()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def heard(stream: io.StringIO, level: str) -> list[str]:
    configure_logging(level, "json", stream=stream)
    logging.getLogger("pgserver").info("Running commandline: initdb ...")
    logging.getLogger("temporalio.worker._worker").info("Beginning worker shutdown")
    logging.getLogger("pgserver").warning("could not stop the server")
    logging.getLogger("agentledger.worker.drain").info("stopped: no step was in hand")
    logging.getLogger("temporalio.workflow").info("a workflow's own line")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [f"{e['logger']}: {e['message']}" for e in lines]


def test_other_libraries_are_heard_from_warning_up(stream: io.StringIO) -> None:
    assert heard(stream, "INFO") == [
        "pgserver: could not stop the server",
        "agentledger.worker.drain: stopped: no step was in hand",
        "temporalio.workflow: a workflow's own line",
    ]


def test_at_debug_every_library_is_heard(stream: io.StringIO) -> None:
    assert len(heard(stream, "DEBUG")) == 5


def agentledger_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "starter.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "settings"],
        ["settings", "--json"],
        ["--log-level", "warning", "settings", "--json"],
        ["settings", "--json", "--log-level", "warning"],
        ["--json", "completion", "bash"],
    ],
)
def test_json_and_log_level_are_taken_before_or_after_the_command(args: list[str]) -> None:
    done = agentledger_command(*args)
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), dict)


def test_a_flag_typed_twice_keeps_what_was_typed() -> None:
    """A command's parser never resets a flag typed before the command's name."""
    from agentledger.cli.main import parser

    args = parser().parse_args(["--json", "--log-level", "error", "status", "run-x"])
    assert (args.json, args.log_level) == (True, "ERROR")
    args = parser().parse_args(["status", "run-x"])
    assert (args.json, args.log_level) == (False, None)


def test_deploy_patches_prints_no_maintenance_steps() -> None:
    """What `deploy patches` prints of each branch is for operators: no test files to move,
    no SDK calls to make in the project's code."""
    maintenance = ("tests/", "archive", "deprecate_patch", "OLDEST_GENERATION", "remove it")
    for branch in version_branches.LIVE:
        for use in (
            version_branches.BranchUse(branch=branch, open_runs=[]),
            version_branches.BranchUse(branch=branch, open_runs=["run-a"]),
        ):
            shown = f"{use.advice} {branch.removal} {branch.old_path}"
            assert not [m for m in maintenance if m in shown], shown


class Nap(BaseModel):
    seconds: float


def napping_registry(started: asyncio.Event, finished: list[float]) -> ToolRegistry:
    async def nap(args: Nap, ctx: ToolContext) -> dict[str, float]:
        started.set()
        await asyncio.sleep(args.seconds)
        finished.append(args.seconds)
        return {"slept": args.seconds}

    # A tool that takes a while runs as an activity of its own: a local one is not cut at the
    # grace period, as the operations guide says.
    tool = Tool("nap", "sleep a while", Nap, nap, transactional=False, local=False)
    return ToolRegistry([*agentledger.demo.registry.tools(), tool])


async def stop_mid_step(
    client, settings, worker, caplog, *, nap: float, drain: float
) -> tuple[list[float], list[str]]:
    """Start a run whose tool naps, stop the worker while it naps; what ran, what was said."""
    started, finished = asyncio.Event(), []
    draining = settings.model_copy(update={"drain_seconds": drain})
    spec = make_spec("nap", allowed_tools=["nap"], timeouts={"heartbeat_seconds": 60})
    caplog.set_level(logging.INFO, logger="agentledger.worker.drain")
    with OfflineModelServer(scripted([("nap", {"seconds": nap})], "## Summary\nDone.")) as model:
        async with worker(
            settings=draining,
            registry=napping_registry(started, finished),
            base_url=model.base_url,
        ):
            await ops.start_run(client, spec, task_queue=settings.task_queue)
            await asyncio.wait_for(started.wait(), 60)
    said = [r.getMessage() for r in caplog.records if r.name == "agentledger.worker.drain"]
    return finished, said


async def test_a_stopping_worker_lets_its_step_finish_and_says_so(
    client, settings, worker, caplog
) -> None:
    finished, said = await stop_mid_step(client, settings, worker, caplog, nap=1.5, drain=30)
    assert finished == [1.5], "the step in hand finished before the worker stopped"
    assert said[0].startswith("stopping: 1 step(s) in hand get up to 30s"), said
    assert said[-1].startswith("stopped: the 1 step(s) in hand finished in"), said


async def test_a_step_past_the_grace_period_is_cancelled_and_said_to_be(
    client, settings, worker, caplog
) -> None:
    finished, said = await stop_mid_step(client, settings, worker, caplog, nap=60, drain=0.5)
    assert finished == []
    assert "1 of 1 step(s) in hand did not finish within 0.5s and were cancelled" in said[-1]
