"""Logging the Python way: library code logs to module loggers and never prints; agentledger's
own commands send the records to stderr, as text or (AGENTLEDGER_LOG_FORMAT=json) one JSON
object per line; a worker with no tools refuses to start unless told `--demo`."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.core.log_setup import configure_logging
from agentledger.worker.worker_api import run_worker
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
# The command line's own output (tables, receipts, JSON for machines) is what it is for.
PRINTING_ALLOWED = ("agentledger/cli/",)


def test_no_library_module_calls_print() -> None:
    printing = []
    for path in sorted(ROOT.glob("agentledger/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(PRINTING_ALLOWED):
            continue
        for node in ast.walk(parse_python(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                printing.append(f"{relative}:{node.lineno}")
    assert not printing, f"library code logs (logging.getLogger(__name__)), not prints: {printing}"


def test_json_lines_carry_the_message_the_extras_and_the_traceback() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        configure_logging("debug", "json", stream=stream)
        configure_logging("DEBUG", "json", stream=stream)  # again: replaced, not doubled
        log = logging.getLogger("agentledger.test")
        log.info("worker %s polling", "w1", extra={"task_queue": "q1"})
        configure_logging("INFO", "json", stream=stream)
        logging.getLogger("httpx2").info("HTTP Request: POST /v1/chat/completions")  # unheard
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it failed")
    finally:  # the test runner's logging as it was
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["level"], e["logger"], e["message"]) for e in lines] == [
        ("INFO", "agentledger.test", "worker w1 polling"),
        ("ERROR", "agentledger.test", "it failed"),
    ]
    assert lines[0]["task_queue"] == "q1" and lines[0]["time"].endswith("+00:00")
    assert "ValueError: boom" in lines[1]["exception"]


def test_a_bad_log_setting_is_refused_with_its_name() -> None:
    with pytest.raises(SetupError, match=r"(?i)log_format"):
        AgentLedgerConfig.load({"AGENTLEDGER_LOG_FORMAT": "xml"})
    assert AgentLedgerConfig.load({"AGENTLEDGER_LOG_LEVEL": "debug"}).log_level == "DEBUG"


def worker_command(*flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "worker.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "AGENTLEDGER_HOME": "/nonexistent",
            "AGENTLEDGER_TOOLS": "",
            "AGENTLEDGER_MCP": "",
            **env,
        },
    )


def test_a_worker_with_no_tools_refuses_to_start_and_says_so_in_json() -> None:
    done = worker_command(AGENTLEDGER_LOG_FORMAT="json")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    entry = json.loads(line)
    assert (entry["level"], entry["logger"]) == ("ERROR", "agentledger.worker.main")
    assert "no tools to serve" in entry["message"] and "--demo" in entry["message"]


async def test_run_worker_with_no_tools_refuses_before_connecting() -> None:
    # Nothing listens at this address: the refusal comes first, not a connection error.
    settings = AgentLedgerConfig.load(
        {"TEMPORAL_ADDRESS": "127.0.0.1:9", "AGENTLEDGER_HOME": "/nonexistent"}
    )
    with pytest.raises(SetupError, match="no tools to serve"):
        await run_worker(settings=settings)


async def test_a_demo_worker_logs_json_lines_on_stderr_and_nothing_on_stdout(settings) -> None:
    """`worker.py --demo` as a log pipeline reads it: every stderr line one JSON object, the
    polling line with its queue and tools as fields, stdout empty."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        "--demo",
        "--log-level",
        "info",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": settings.openai_base_url,
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
            "AGENTLEDGER_LOG_FORMAT": "json",
            "AGENTLEDGER_TOOLS": "",
            "AGENTLEDGER_MCP": "",
        },
    )
    assert process.stderr is not None
    seen: list[dict[str, object]] = []
    try:
        async with asyncio.timeout(90):
            while not any("polling" in str(e["message"]) for e in seen):
                line = await process.stderr.readline()
                assert line, f"the worker exited: {seen}"
                seen.append(json.loads(line))
    finally:
        process.send_signal(signal.SIGINT)
        stdout, rest = await asyncio.wait_for(process.communicate(), 60)
    seen += [json.loads(line) for line in rest.decode().splitlines()]
    assert process.returncode == 0, seen
    assert stdout == b""
    polling = next(e for e in seen if "polling" in str(e["message"]))
    assert polling["logger"] == "agentledger.worker.worker_api"
    assert polling["task_queue"] == settings.task_queue
    assert "send_message" in polling["tools"]  # type: ignore[operator]
    assert any(str(e["message"]).startswith("stopped") for e in seen), seen
