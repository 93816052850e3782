"""MCP servers as tool sources: annotations set the policy, a dead server is started again,
and a call in flight when it died is an unknown outcome, not a silent retry."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import mcp_types
import pytest

from agentledger.dev.offline_model import OfflineModelServer
from agentledger.tools.loading import load_registry
from agentledger.tools.mcp import McpConnection, McpServerDied, mcp_tools
from agentledger.tools.mcp_servers import McpServerSpec
from agentledger.tools.registry import ToolRegistry
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, scripted, wait_pending

SERVER = """
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

HERE = Path(__file__).parent
server = MCPServer("desk")


def record(line):
    with (HERE / "effects.log").open("a") as log:
        log.write(line + "\\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pid() -> int:
    \"\"\"The server's process id.\"\"\"
    return os.getpid()


@server.tool(annotations=ToolAnnotations(destructiveHint=False))
def file_ticket(title: str) -> dict:
    \"\"\"File a ticket; the first call dies right after filing it.\"\"\"
    record(f"ticket {title}")
    if not (HERE / "died").exists():
        (HERE / "died").touch()
        os._exit(1)
    return {"filed": title}


@server.tool(annotations=ToolAnnotations(destructiveHint=False, idempotentHint=True))
def set_status(status: str) -> dict:
    \"\"\"Set the desk's status (idempotent); the first call dies right after setting it.\"\"\"
    record(f"status {status}")
    if not (HERE / "died").exists():
        (HERE / "died").touch()
        os._exit(1)
    return {"status": status}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
"""


@pytest.fixture
def desk(tmp_path: Path) -> McpServerSpec:
    (tmp_path / "desk.py").write_text(SERVER)
    return McpServerSpec.parse(f"desk={sys.executable} {tmp_path / 'desk.py'}")


def listed(name: str, **hints: bool | None) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=name,
        description=f"{name} things",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        annotations=mcp_types.ToolAnnotations(**hints) if hints else None,
    )


def test_annotations_set_the_policy_and_missing_ones_read_cautiously() -> None:
    connection = McpConnection(McpServerSpec.parse("desk=true"))
    read, plain, gentle, repeatable = connection.tools(
        [
            listed("read", read_only_hint=True),
            listed("plain"),  # no annotations at all
            listed("gentle", destructive_hint=False),
            listed("repeatable", destructive_hint=False, idempotent_hint=True),
        ]
    )
    assert (read.name, read.risk.value, read.side_effect) == ("desk__read", "low", False)
    assert (plain.risk.value, plain.side_effect, plain.transactional) == ("high", True, False)
    assert plain.reconcile is None, "not idempotent: a crash mid-call is an unknown outcome"
    assert "outside world" in plain.description, "open world unless said otherwise"
    assert (gentle.risk.value, gentle.side_effect) == ("medium", True)
    assert repeatable.reconcile is not None
    registry = ToolRegistry([read])
    assert registry.check_call("desk__read", '{"n": 3}', None) == ({"n": 3}, None)
    _, error = registry.check_call("desk__read", '{"n": "three"}', None)
    assert error is not None and "'three' is not of type 'integer'" in error
    assert read.openai_schema()["function"]["parameters"]["properties"] == {
        "n": {"type": "integer"}
    }


async def test_a_server_that_dies_is_started_again(desk: McpServerSpec) -> None:
    connection = McpConnection(desk)
    try:
        first = (await connection.call("pid", {}))["result"]
        os.kill(first, 9)  # dies while idle: the next call restarts it and goes through
        await asyncio.sleep(0.5)
        second = (await connection.call("pid", {}))["result"]
        assert second != first and connection.restarts == 1
        with pytest.raises(McpServerDied):  # dies mid-call: the caller must not assume either way
            await connection.call("file_ticket", {"title": "printer"})
        assert await connection.call("file_ticket", {"title": "printer"}) == {"filed": "printer"}
        assert connection.restarts == 2
    finally:
        await connection.close()


async def test_a_call_cut_short_by_the_server_dying_is_an_unknown_outcome(
    client, settings, worker, desk: McpServerSpec, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.log"
    spec = make_spec("File it.", approval={"require_at_or_above": "high"})
    turns = scripted([("desk__file_ticket", {"title": "printer"})], "## Summary\nFiled.")
    async with mcp_tools([desk]) as served:
        registry = load_registry([], served)
        with OfflineModelServer(turns) as model:
            async with worker(registry=registry, base_url=model.base_url):
                started = await ops.start_run(client, spec, task_queue=settings.task_queue)
                pending = await wait_pending(client, started.run_id, seconds=60)
                assert pending.kind == "unknown_outcome" and pending.tool == "desk__file_ticket"
                assert effects.read_text() == "ticket printer\n", "it did happen, once"
                # A person checks the desk, sees the ticket: do not file it again.
                await ops.reject(client, started.run_id, by="li", role="approver", reason="filed")
                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
                result = await handle.result()
    assert result.status.value == "completed"
    assert effects.read_text() == "ticket printer\n", "never repeated"


async def test_an_idempotent_call_cut_short_simply_runs_again(
    client, settings, worker, desk: McpServerSpec, tmp_path: Path
) -> None:
    spec = make_spec("Set it.")
    turns = scripted([("desk__set_status", {"status": "open"})], "## Summary\nSet.")
    async with mcp_tools([desk]) as served:
        with OfflineModelServer(turns) as model:
            async with worker(registry=load_registry([], served), base_url=model.base_url):
                started = await ops.start_run(client, spec, task_queue=settings.task_queue)
                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
                result = await handle.result()
                state = await ops.status(client, started.run_id)
    assert result.status.value == "completed"
    assert (tmp_path / "effects.log").read_text() == "status open\nstatus open\n"
    [step] = [s for s in state.steps if s.type == "tool_call"]
    assert (step.name, step.status, step.attempt) == ("desk__set_status", "completed", 2)
    assert not [s for s in state.steps if s.type == "approval"], "nobody had to decide"


async def test_a_server_over_streamable_http(desk: McpServerSpec, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(tmp_path / "desk.py"), str(port), stderr=asyncio.subprocess.DEVNULL
    )
    try:
        spec = McpServerSpec.parse(f"web=http://127.0.0.1:{port}/mcp")
        for _ in range(100):  # until it listens
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.1)
        async with mcp_tools([spec]) as served:
            [(label, tools)] = served
            assert "web" in label
            assert sorted(t.name for t in tools) == [
                "web__file_ticket",
                "web__pid",
                "web__set_status",
            ]
            pid = next(t for t in tools if t.name == "web__pid")
            answer = await pid.fn(pid.args_model.model_validate({}), None)  # type: ignore[arg-type]
            assert answer == {"result": server.pid}
    finally:
        server.terminate()
        await server.wait()


async def test_an_edit_naming_a_field_an_mcp_tool_lacks_is_refused(desk: McpServerSpec) -> None:
    """An MCP tool's input schema lists its fields without closing the object; an edit of a
    field it does not list would be ignored by the tool, so the run refuses it."""
    from datetime import UTC, datetime

    from temporalio.exceptions import ApplicationError

    from agentledger.core.results import PendingApproval
    from agentledger.core.wire import ApproveInput
    from agentledger.workflows.approvals import check_edit

    connection = McpConnection(desk)
    try:
        [ticket] = [
            t for t in connection.tools(await connection.list_tools()) if "ticket" in t.name
        ]
    finally:
        await connection.close()
    now = datetime.now(UTC)
    pending = PendingApproval(
        kind="action",
        approval_id="0002-approval",
        step_id="0002-approval",
        tool=ticket.name,
        arguments={"title": "printer"},
        action_hash="0" * 16,
        required_role="approver",
        tenant="default",
        requested_at=now,
        expires_at=now,
        parameters=ticket.parameters,
    )

    def edit(fields: dict[str, object]) -> ApproveInput:
        return ApproveInput(action_hash="h", by="li", role="approver", edit=fields)

    with pytest.raises(ApplicationError, match="nosuch: the tool has no such field"):
        check_edit(pending, edit({"nosuch": "x"}), merge_patches=True)
    check_edit(pending, edit({"title": "scanner"}), merge_patches=True)  # a field it has
