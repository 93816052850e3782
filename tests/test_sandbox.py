"""run_code on a real Docker engine: code that computes returns its answer; code that opens a
socket, writes outside its tmpfs, forks without end, loops for ever or prints 100 MB is
contained and the run goes on, the model told; an engine that is not there is retried with a
clear status; a worker killed mid-execution leaves no container once a worker starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from agentledger.cli.main import main as cli
from agentledger.core.errors import SANDBOX_UNAVAILABLE, SetupError
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.tools.registry import ToolRegistry
from agentledger.tools.sandbox import (
    LABEL,
    SandboxEngine,
    SandboxLimits,
    run_code_tool,
    sandbox_tools,
)
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests import sandbox_support
from tests.sandbox_support import Engine
from tests.support import eventually, make_spec, rows, scripted

pytestmark = pytest.mark.timeout(300)
docker_engine = sandbox_support.docker_engine  # the session's engine and sandbox image

NO_ENGINE, API_VERSION = "unix:///run/no-such-engine.sock", "1.41"
QUICK = SandboxLimits(seconds=3, memory_mb=128, output_bytes=200_000)

HOSTILE = {
    "socket": "import socket\nsocket.create_connection(('93.184.216.34', 80), timeout=2)",
    "outside": "open('/usr/lib/owned', 'w').write('x')",
    "forks": textwrap.dedent(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    ),
    "forever": "while True:\n    pass",
    "flood": "chunk = 'x' * 1_000_000\nfor _ in range(100):\n    print(chunk)",
}


def engine_of(docker_engine: Engine, limits: SandboxLimits = QUICK) -> SandboxEngine:
    return SandboxEngine(docker_engine.client, docker_engine.image, limits, identity="test")


def sandbox_containers(docker_engine: Engine, run_id: str | None = None) -> list[Any]:
    """The engine's sandbox containers, or one run's: the engine may be shared with other
    test sessions, whose containers come and go on their own."""
    labels = [LABEL, *([f"agentledger.run_id={run_id}"] if run_id else [])]
    return docker_engine.client.containers.list(all=True, filters={"label": labels})


def recording_model(turns: Any, seen: list[dict[str, Any]]) -> Any:
    def respond(request: dict[str, Any]) -> Any:
        seen.append(request)
        return turns(request)

    return respond


async def test_code_that_computes_returns_its_answer_and_its_files(
    client, settings, worker, pool, docker_engine: Engine
) -> None:
    code = textwrap.dedent(
        """
        import csv, json
        rows = list(csv.reader(open('inputs/prices.csv')))
        total = sum(int(price) for _, price in rows)
        print(total)
        json.dump({'total': total}, open('outputs/total.json', 'w'))
        """
    )
    # The input is an earlier step's artifact: the first run_code writes it, the second reads it.
    writer = "open('outputs/prices.csv', 'w').write('tea,3\\ncake,4\\nbread,35\\n')"
    tool = run_code_tool(engine_of(docker_engine))
    seen: list[dict[str, Any]] = []

    def turns(request: dict[str, Any]) -> Any:
        from agentledger.dev.offline_model import completion

        results = [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]
        if not results:
            return completion(request, tool_calls=[("run_code", {"code": writer})])
        if len(results) == 1:
            prices = results[0]["files"][0]["artifact_id"]
            return completion(request, tool_calls=[("run_code", {"code": code, "files": [prices]})])
        return completion(request, content=f"## Summary\nThe total is {results[1]['stdout']}")

    with OfflineModelServer(recording_model(turns, seen)) as model:
        async with worker(registry=ToolRegistry([tool]), base_url=model.base_url):
            started = await ops.start_run(
                client, make_spec("Add up the prices."), task_queue=settings.task_queue
            )
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed", result
    told = json.loads([m for m in seen[-1]["messages"] if m["role"] == "tool"][-1]["content"])
    assert told["status"] == "ok" and told["exit_code"] == 0 and told["stdout"] == "42\n"
    assert told["image_digest"] == docker_engine.digest
    (total,) = told["files"]
    assert total["name"] == "total.json"
    stored = await rows(
        pool, "SELECT content FROM artifacts WHERE artifact_id = %s", total["artifact_id"]
    )
    assert json.loads(bytes(stored[0]["content"])) == {"total": 42}
    receipt = await ops.receipt(pool, started.run_id)
    executions = receipt["sandbox_executions"]
    assert [e["image_digest"] for e in executions] == [docker_engine.digest] * 2
    assert [e["status"] for e in executions] == ["ok", "ok"]
    assert sandbox_containers(docker_engine, started.run_id) == [], "every container is removed"


async def test_hostile_code_is_contained_and_the_run_goes_on_with_the_model_told(
    client, settings, worker, pool, docker_engine: Engine
) -> None:
    tool = run_code_tool(engine_of(docker_engine))
    seen: list[dict[str, Any]] = []
    calls = [("run_code", {"code": code}) for code in HOSTILE.values()]
    turns = scripted(calls, "## Summary\nThe sandbox held.")
    started_at = time.monotonic()
    with OfflineModelServer(recording_model(turns, seen)) as model:
        async with worker(registry=ToolRegistry([tool]), base_url=model.base_url):
            started = await ops.start_run(
                client, make_spec("Try to get out."), task_queue=settings.task_queue
            )
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed", result
    told = [json.loads(m["content"]) for m in seen[-1]["messages"] if m["role"] == "tool"]
    by_code = dict(zip(HOSTILE, told, strict=True))
    assert by_code["socket"]["status"] == "error"
    assert "Network is unreachable" in by_code["socket"]["stderr"]
    assert by_code["outside"]["status"] == "error"
    assert "Read-only file system" in by_code["outside"]["stderr"]
    assert by_code["forks"]["status"] in ("timeout", "error"), by_code["forks"]
    assert by_code["forever"]["status"] == "timeout"
    assert "time limit" in by_code["forever"]["explanation"]
    flood = by_code["flood"]
    assert flood["status"] == "output_limit", flood
    assert flood["stdout_bytes"] <= QUICK.output_bytes, "reading stopped at the limit"
    # Each failure was the code's own: one attempt each, none retried.
    attempts = await rows(
        pool,
        "SELECT attempt FROM steps WHERE run_id = %s AND type = 'tool_call'",
        started.run_id,
    )
    assert [a["attempt"] for a in attempts] == [1] * len(HOSTILE)
    assert time.monotonic() - started_at < 120
    assert sandbox_containers(docker_engine, started.run_id) == []


def test_an_engine_that_is_not_there_is_a_retryable_failure_with_a_clear_status(
    docker_engine: Engine,
) -> None:
    import docker

    gone = SandboxEngine(docker.DockerClient(base_url=NO_ENGINE, version=API_VERSION))
    with pytest.raises(ApplicationError) as raised:
        gone.image_digest()
    assert raised.value.type == SANDBOX_UNAVAILABLE and not raised.value.non_retryable
    assert "sandbox unavailable: the Docker engine does not answer" in str(raised.value)
    missing = SandboxEngine(docker_engine.client, "agentledger-no-such-image:1")
    with pytest.raises(ApplicationError, match="agentledger sandbox build") as raised:
        missing.image_digest()
    assert raised.value.type == SANDBOX_UNAVAILABLE
    with pytest.raises(SetupError, match="no such image"):
        sandbox_tools("agentledger-no-such-image:1", client=docker_engine.client)


async def test_a_run_waits_out_a_missing_engine_and_goes_on_when_it_answers(
    client, settings, worker, pool, docker_engine: Engine
) -> None:
    import docker

    gone = SandboxEngine(
        docker.DockerClient(base_url=NO_ENGINE, version=API_VERSION), docker_engine.image
    )
    turns = scripted([("run_code", {"code": "print(6 * 7)"})], "## Summary\n42")
    spec = make_spec(
        "Compute.",
        timeouts={"heartbeat_seconds": 5, "initial_retry_seconds": 0.2, "max_attempts": 50},
        failures={"max_retry_seconds": 0.5},
    )
    with OfflineModelServer(turns) as model:
        async with worker(registry=ToolRegistry([run_code_tool(gone)]), base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)

            async def failed_twice() -> list[dict[str, Any]] | None:
                found = await rows(
                    pool,
                    "SELECT error FROM step_attempts WHERE run_id = %s AND status = 'failed'",
                    started.run_id,
                )
                return found if len(found) >= 2 else None

            failures = await eventually(failed_twice, seconds=60, what="two failed attempts")
        assert all("sandbox unavailable" in f["error"] for f in failures), failures
        tool = run_code_tool(engine_of(docker_engine))
        async with worker(registry=ToolRegistry([tool]), base_url=model.base_url):
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed" and result.answer == "## Summary\n42", result


KILLED_WORKER = """
import sys, docker
from agentledger.core.sandbox_limits import SandboxLimits
from agentledger.tools.sandbox import SandboxEngine
engine = SandboxEngine(docker.DockerClient(base_url=sys.argv[1]), sys.argv[2],
                       SandboxLimits(seconds=120), identity="doomed")
container = engine.create({"agentledger.run_id": "run-doomed", "agentledger.step_id": "0002-tool"})
print(container.id, flush=True)
engine.execute(container, "while True:\\n    pass", {})
"""


def test_a_worker_killed_mid_execution_leaves_no_container_once_a_worker_starts(
    docker_engine: Engine,
) -> None:
    doomed = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, docker_engine.base_url, docker_engine.image],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert doomed.stdout is not None
    container_id = doomed.stdout.readline().strip()
    time.sleep(3)  # the code is running
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait()
    (left,) = [c for c in sandbox_containers(docker_engine) if c.id == container_id]
    assert left.labels["agentledger.worker"] == "doomed"
    assert left.labels["agentledger.run_id"] == "run-doomed"
    assert left.labels["agentledger.step_id"] == "0002-tool"
    # A worker starting with --sandbox reaps what dead workers left.
    sandbox_tools(docker_engine.image, client=docker_engine.client)
    assert [c for c in sandbox_containers(docker_engine) if c.id == container_id] == []


def test_limits_parse_and_refuse_nonsense() -> None:
    limits = SandboxLimits.parse("seconds=60, memory_mb=512,cpus=0.5")
    assert (limits.seconds, limits.memory_mb, limits.cpus, limits.pids) == (60, 512, 0.5, 64)
    for bad in ("walltime=3", "seconds=soon", "pids=0"):
        with pytest.raises(SetupError):
            SandboxLimits.parse(bad)


def test_the_build_command_reuses_an_image_of_the_same_recipe(
    docker_engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_engine.base_url)
    assert cli(["sandbox", "build", "--name", docker_engine.image, "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["reused"] is True and built["digest"] == docker_engine.digest
    labels = docker_engine.client.images.get(docker_engine.image).labels
    assert labels["agentledger.sandbox.key"] == built["key"]


def test_the_worker_flag_adds_run_code_beside_the_demo_tools(
    docker_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from agentledger.core.config import AgentLedgerConfig
    from agentledger.tools.loading import DEMO_TOOLS, load_registry
    from agentledger.worker.tool_flags import add_tool_flags, tool_sources

    monkeypatch.setenv("DOCKER_HOST", docker_engine.base_url)
    parser = argparse.ArgumentParser()
    add_tool_flags(parser)
    flags = ["--sandbox", docker_engine.image, "--sandbox-limits", "seconds=5"]
    alone, _ = tool_sources(parser.parse_args(flags), AgentLedgerConfig.load({}), "worker-7")
    assert [t.name for t in alone[0]] == ["run_code"], "named alone, run_code alone"
    args = parser.parse_args([*flags, "--tools", DEMO_TOOLS])
    tools, mcp = tool_sources(args, AgentLedgerConfig.load({}), "worker-7")
    assert tools[0] == DEMO_TOOLS and mcp == []
    registry = load_registry(tools)
    assert "run_code" in registry.names() and "send_message" in registry.names()
    assert "at most 5 s" in registry.get("run_code").description
    assert not registry.get("run_code").side_effect, "a retry is safe: nothing leaves the box"


async def test_a_worker_process_killed_while_code_runs_leaves_no_container_and_the_run_finishes(
    client, settings, worker, pool, docker_engine: Engine, tmp_path
) -> None:
    import asyncio

    turns = scripted(
        [("run_code", {"code": "import time\ntime.sleep(4)\nprint(6 * 7)"})], "## Summary\n42"
    )
    with OfflineModelServer(turns) as model:
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test",
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
            "AGENTLEDGER_HOME": str(tmp_path),
            "DOCKER_HOST": docker_engine.base_url,
        }
        log = (tmp_path / "worker.log").open("wb")
        doomed = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentledger.worker.main",
            "--identity",
            "doomed-worker",
            "--sandbox",
            docker_engine.image,
            "--sandbox-limits",
            "seconds=60",
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            spec = make_spec(
                "Compute.", timeouts={"heartbeat_seconds": 3, "initial_retry_seconds": 0.2}
            )
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)

            async def running() -> list[Any]:
                return [
                    c
                    for c in sandbox_containers(docker_engine)
                    if c.labels.get("agentledger.run_id") == started.run_id
                ]

            try:
                (box,) = await eventually(running, seconds=90, what="the code to run")
            except AssertionError:
                raise AssertionError((tmp_path / "worker.log").read_text()[-3000:]) from None
            assert box.labels["agentledger.worker"] == "doomed-worker"
            os.kill(doomed.pid, signal.SIGKILL)
            await doomed.wait()
        finally:
            if doomed.returncode is None:
                doomed.kill()
                await doomed.wait()
        assert await running(), "the dead worker's container is still there"
        # A worker that starts with --sandbox reaps it, then takes the step over.
        limits = SandboxLimits(seconds=20)
        tools = sandbox_tools(docker_engine.image, limits, client=docker_engine.client)
        assert await running() == []
        async with worker(registry=ToolRegistry(tools), base_url=model.base_url):
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed" and result.answer == "## Summary\n42", result
    steps = await rows(
        pool,
        "SELECT attempt, output->>'stdout' AS stdout FROM steps "
        "WHERE run_id = %s AND type = 'tool_call'",
        started.run_id,
    )
    assert steps == [{"attempt": 2, "stdout": "42\n"}]
    assert sandbox_containers(docker_engine, started.run_id) == []
