"""One policy for every agent protocol face, each driven by its own client: AG-UI over HTTP
(as tests/test_agui.py reads it), A2A with the `a2a-sdk`'s client, MCP with the `mcp`
client. On each face a runner's run reaches its approval; then a viewer's key cannot start
a run, the runner's key cannot approve, and another tenant's key never reaches the run: it
reads exactly as a run that does not exist. The run still waits, undecided, at the end."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger.core.config import AgentLedgerConfig
from agentledger.store import tool_sets
from tests.http_support import bearer, make_key, served, tenant_name
from tests.mcp_support import (
    DetailedTask,
    GetTask,
    TaskParams,
    Tasks,
    TaskUpdateParams,
    UpdateTask,
    mcp_client,
)
from tests.support import NOTIFY_TASK

pytest.importorskip("a2a.client", reason="the a2a extra")
pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is the serve extra")
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from tests.test_a2a import a2a_client
from tests.test_agui import AGENT, agui_run, run_input


class AgUi:
    """AG-UI: a thread is a run; an approval is an interrupt resumed on the thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.thread = f"thread-{uuid.uuid4().hex[:8]}"
        self.answer: dict[str, Any] = {}

    async def start(self, key: str) -> str:
        async with httpx.AsyncClient(base_url=self.url, timeout=90) as http:
            events = await agui_run(http, run_input(self.thread), key)
        [interrupt] = events[-1].outcome.interrupts
        self.answer = {
            "interruptId": interrupt.id,
            "status": "resolved",
            "payload": {"approved": True},
        }
        snapshot = [e for e in events if e.type.value == "STATE_SNAPSHOT"][-1]
        return str(snapshot.snapshot["agentledger"]["run_id"])

    async def post(self, key: str, thread: str, **body: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.url, timeout=90) as http:
            return await http.post(
                f"/v1/agents/{AGENT}/agui", json=run_input(thread, **body), headers=bearer(key)
            )

    async def start_refused(self, key: str) -> str:
        refused = await self.post(key, f"thread-{uuid.uuid4().hex[:8]}")
        assert refused.status_code == 403, refused.text
        return refused.text

    async def approve_refused(self, key: str, run_id: str) -> str:
        refused = await self.post(key, self.thread, resume=[self.answer])
        assert refused.status_code == 403, refused.text
        return refused.text

    async def reach(self, key: str, run_id: str) -> str:
        thread = self.thread if run_id.endswith(self.thread) else run_id.rsplit(".", 1)[-1]
        found = await self.post(key, thread, resume=[self.answer])
        return f"{found.status_code} {found.json()['error']['kind']}"


class A2a:
    """A2A: a task is a run; an approval is input-required, answered by a reply."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def start(self, key: str) -> str:
        client = await a2a_client(self.url, key)
        ask = Message(
            message_id=f"m-{uuid.uuid4().hex[:8]}",
            role=Role.ROLE_USER,
            parts=[Part(text=NOTIFY_TASK)],
        )
        events = [e async for e in client.send_message(SendMessageRequest(message=ask))]
        return str(events[0].task.id)

    async def send(self, key: str, message: Message) -> None:
        client = await a2a_client(self.url, key, streaming=False)
        [_ async for _ in client.send_message(SendMessageRequest(message=message))]

    async def start_refused(self, key: str) -> str:
        ask = Message(message_id="m-view", role=Role.ROLE_USER, parts=[Part(text=NOTIFY_TASK)])
        with pytest.raises(Exception, match="403") as refused:
            await self.send(key, ask)
        return str(refused.value)

    async def approve_refused(self, key: str, run_id: str) -> str:
        decision = json_format.ParseDict({"decision": "approve"}, struct_pb2.Value())
        reply = Message(
            message_id=f"r-{uuid.uuid4().hex[:8]}",
            task_id=run_id,
            role=Role.ROLE_USER,
            parts=[Part(data=decision)],
        )
        with pytest.raises(Exception, match="403") as refused:
            await self.send(key, reply)
        return str(refused.value)

    async def reach(self, key: str, run_id: str) -> str:
        client = await a2a_client(self.url, key, streaming=False)
        with pytest.raises(TaskNotFoundError) as missing:
            await client.get_task(GetTaskRequest(id=run_id))
        return type(missing.value).__name__


class Mcp:
    """MCP: an agent is a tool; an approval a form for those who may decide, answered on
    the call's retry or with tasks/update."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def start(self, key: str) -> str:
        async with mcp_client(self.url, key) as mcp:
            waiting = await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
        assert waiting.structured_content["status"] == "waiting_for_approval", waiting
        self.approval = waiting.structured_content["approval"]
        return str(waiting.structured_content["run_id"])

    async def start_refused(self, key: str) -> str:
        async with mcp_client(self.url, key) as mcp:
            with pytest.raises(MCPError, match="forbidden") as refused:
                await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
        return refused.value.message

    async def approve_refused(self, key: str, run_id: str) -> str:
        approve = {"action": "accept", "content": {"decision": "approve"}}
        key_of = f"approval.{self.approval['approval_id']}"
        async with mcp_client(self.url, key, extensions=[Tasks()]) as mcp:
            update = UpdateTask(
                params=TaskUpdateParams(task_id=run_id, input_responses={key_of: approve})
            )
            with pytest.raises(MCPError, match="forbidden") as refused:
                await mcp.session.send_request(update, types.EmptyResult)
        # Nor by echoing a form's answer on a tool call of its own.
        state = {
            "run": run_id,
            "approval": self.approval["approval_id"],
            "action_hash": self.approval["action_hash"],
            "seq": 0,
        }
        async with mcp_client(self.url, key) as mcp:
            with pytest.raises(MCPError, match="forbidden"):
                await mcp.call_tool(
                    AGENT,
                    {"task": NOTIFY_TASK},
                    input_responses={key_of: types.ElicitResult.model_validate(approve)},
                    request_state=json.dumps(state),
                )
        return refused.value.message

    async def reach(self, key: str, run_id: str) -> str:
        async with mcp_client(self.url, key, extensions=[Tasks()]) as mcp:
            with pytest.raises(MCPError, match="no run") as missing:
                asking = GetTask(params=TaskParams(task_id=run_id))
                await mcp.session.send_request(asking, DetailedTask)
            with pytest.raises(MCPError, match="no run"):
                await mcp.read_resource(f"agentledger://runs/{run_id}/events")
        return str(missing.value.code)


FACES = {"agui": AgUi, "a2a": A2a, "mcp": Mcp}


def refused_by_role(said: str) -> bool:
    return "403" in said or "forbidden" in said


@pytest.mark.parametrize("face", FACES)
async def test_no_face_lets_a_viewer_start_a_runner_approve_or_a_stranger_reach_a_run(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path, face: str
) -> None:
    tenant, other = tenant_name(), tenant_name()
    viewer = await make_key(settings, tenant, "viewer")
    runner = await make_key(settings, tenant, "runner")
    stranger = await make_key(settings, other, "admin")
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    async with worker(), served(settings, tmp_path) as door:
        client = FACES[face](door.url)
        run_id = await client.start(runner)
        assert run_id.startswith(f"run-{tenant}~")

        # Each face refuses in its own terms (403, or a JSON-RPC error saying forbidden).
        assert refused_by_role(await client.start_refused(viewer))
        assert refused_by_role(await client.approve_refused(runner, run_id))
        # Another tenant's run reads exactly as one that does not exist.
        missing = run_id[: run_id.rindex(".") + 1] + "nothing"
        assert await client.reach(stranger, run_id) == await client.reach(stranger, missing)

        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            state = (await http.get(f"/v1/runs/{run_id}", headers=bearer(runner))).json()
    await tool_sets.leave(pool, settings.task_queue, "w")
    assert state["status"] == "waiting_for_approval", "nothing was decided"
    assert state["pending_approval"]["tool"] == "send_message"
