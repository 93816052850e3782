"""Loading a worker's tools: `@agentledger.tool`, `worker.py --tools`, and one tool set per
queue."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

import agentledger
import agentledger.demo
from agentledger.core.errors import ToolLoadError, ToolSetConflict
from agentledger.core.spec import RiskLevel
from agentledger.dev.stack import free_port
from agentledger.store import tool_sets
from agentledger.tools.loading import load_registry

ROOT = Path(__file__).resolve().parent.parent


class Echo(BaseModel):
    text: str


@agentledger.tool(risk="high", side_effect=True, secret_args=["text"], schema=["SELECT 1"])
async def shout(args: Echo, ctx: agentledger.ToolContext) -> dict[str, str]:
    """Say it loudly."""
    return {"said": args.text.upper()}


def test_the_decorator_reads_the_signature_and_docstring() -> None:
    assert shout.name == "shout"
    assert shout.description == "Say it loudly."
    assert shout.args_model is Echo
    assert (shout.risk, shout.side_effect, shout.secret_args) == (RiskLevel.HIGH, True, ("text",))
    assert shout.openai_schema()["function"]["parameters"]["required"] == ["text"]


def test_the_decorator_refuses_what_the_model_could_not_use() -> None:
    with pytest.raises(TypeError, match="docstring"):

        @agentledger.tool
        async def silent(args: Echo, ctx: agentledger.ToolContext) -> None:
            pass

    with pytest.raises(TypeError, match="SomePydanticModel"):

        @agentledger.tool
        async def untyped(args: dict, ctx: agentledger.ToolContext) -> None:  # type: ignore[type-arg]
            """No model."""


def test_references_load_registries_tools_and_lists() -> None:
    registry = load_registry(["agentledger.demo:registry", shout])
    assert "shout" in registry.names() and "send_message" in registry.names()
    listed = load_registry(
        [[agentledger.demo.tools.fetch_page], "agentledger.demo.tools:search_notes"]
    )
    assert listed.names() == ["fetch_page", "search_notes"]
    with pytest.raises(ToolLoadError, match="comes from both"):
        load_registry(["agentledger.demo:registry", "agentledger.demo.tools:search_notes"])
    with pytest.raises(ToolLoadError, match="has no attribute"):
        load_registry(["agentledger.demo:nothing"])
    with pytest.raises(ToolLoadError, match="cannot import"):
        load_registry(["no_such_module:tools"])
    with pytest.raises(ToolLoadError, match="not a ToolRegistry"):
        load_registry(["agentledger.demo.schema:OUTBOX"])


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--tools", "no_such_module:tools"], "cannot import 'no_such_module'"),
        (["--tools", "agentledger.demo:nothing"], "has no attribute 'nothing'"),
        (
            [
                "--tools",
                "agentledger.demo:registry",
                "--tools",
                "agentledger.demo.tools:search_notes",
            ],
            "tool 'search_notes' comes from both",
        ),
        (["--tools", "agentledger.demo"], "expected PKG.MODULE:ATTR"),
        (["--mcp", "broken"], "expected NAME=COMMAND"),
        ([], "cannot import 'no_such_module'"),  # AGENTLEDGER_TOOLS, below
    ],
)
def test_worker_exits_2_with_one_line(flags: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "worker.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "AGENTLEDGER_HOME": "/nonexistent",
            "AGENTLEDGER_TOOLS": "agentledger.demo:registry, no_such_module:tools",
            "AGENTLEDGER_MCP": "",
        },
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


async def test_workers_with_other_tools_may_not_share_a_queue(pool, settings) -> None:
    queue = settings.task_queue
    await tool_sets.join(pool, queue, "w1", ["a", "b"])
    await tool_sets.join(pool, queue, "w2", ["b", "a"])  # the same set: welcome
    with pytest.raises(ToolSetConflict, match=r"\['b'\] this one lacks.*adds \['c'\]"):
        await tool_sets.join(pool, queue, "w3", ["a", "c"])
    assert await tool_sets.served_tools(pool, queue) == ["a", "b"]
    await tool_sets.leave(pool, queue, "w1")
    await tool_sets.leave(pool, queue, "w2")
    await tool_sets.join(pool, queue, "w3", ["a", "c"])  # the others left: the queue is free


async def test_a_second_kind_of_worker_refuses_to_start(pool, settings) -> None:
    await tool_sets.join(pool, settings.task_queue, "first", ["search_notes"])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        "--tools",
        "agentledger.demo:registry",
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": settings.openai_base_url,
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        },
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2, stderr
    assert b"is served by worker first with other tools" in stderr
    assert b"AGENTLEDGER_TASK_QUEUE" in stderr


def test_the_public_api_is_small_and_every_name_resolves() -> None:
    # Ten names to write a tool and a worker against, three to plug into a Temporal app of
    # your own (AgentLedgerPlugin, AgentLedgerConfig, worker_command_line), and the error
    # family (each with its exit code).
    errors = {"AgentLedgerError", "InvalidInput", "NotFound", "Unreachable", "Refused"}
    assert errors <= set(agentledger.__all__)
    assert len(set(agentledger.__all__) - errors) <= 13, "the public API stays small"
    assert {"tool", "ToolRegistry", "Agent", "RunSpec", "run_worker", "RunClient"} <= set(
        agentledger.__all__
    )
    assert all(getattr(agentledger, name) is not None for name in agentledger.__all__)
    with pytest.raises(AttributeError):
        agentledger.Worker  # noqa: B018


def test_up_refuses_a_bad_tool_reference_before_starting_the_stack(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "up", "--tools", "no_such_module:tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTLEDGER_HOME": str(tmp_path / "home"), "AGENTLEDGER_TOOLS": ""},
    )
    assert done.returncode == 2, done.stderr
    assert "cannot import 'no_such_module'" in done.stderr
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").iterdir()), (
        "nothing started"
    )


async def test_up_serves_the_tools_it_is_given(tmp_path: Path) -> None:
    """`starter.py up --tools` runs the stack's worker with your tools, as `worker.py` does."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "up",
        "--port",
        str(free_port()),
        "--ui-port",
        str(free_port()),
        "--tools",
        "examples.my_agent.my_tools:registry",
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "AGENTLEDGER_HOME": str(tmp_path / "home"), "AGENTLEDGER_TOOLS": ""},
    )
    assert process.stderr is not None
    try:
        polling, logged = b"", b""
        async with asyncio.timeout(120):
            while b"with tools:" not in polling:  # the worker logs it, on stderr
                polling = await process.stderr.readline()
                logged += polling
                assert polling, logged.decode()
        assert polling.decode().split("with tools: ")[1].split(";")[0] == "refund"
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 60)
    assert process.returncode == 0
