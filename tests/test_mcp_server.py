"""MCP on the real stack, driven by the official `mcp` client over streamable HTTP:
`agentledger serve` in a subprocess, a worker, keys in Postgres.

An agent is a tool. Called by a credential that may decide, from a client that shows forms,
the run's approval comes as an elicitation (protocol 2026-07-28's input_required round, and
the handshake era's form on the session), answered with an edit, and the call ends with the
answer and the receipt. A runner's call is told the run waits for approval, with the inbox,
and the run completes after an approver decides there. A client speaking the Tasks
extension gets the run as a task, polls it to its approval and through it to completion."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client as TemporalClient

import agentledger.demo
from agentledger import RunClient
from agentledger.client.receipts import receipt_of
from agentledger.core.config import AgentLedgerConfig
from agentledger.store import tool_sets
from tests.http_support import (
    SESSION_PROFILE,
    bearer,
    doc_block,
    identity,
    make_key,
    served,
    tenant_name,
)
from tests.mcp_support import (
    CreatedTask,
    DetailedTask,
    GetTask,
    TaskParams,
    Tasks,
    accept,
    mcp_client,
    read_text,
    said,
)
from tests.support import NOTIFY_TASK, eventually

AGENT = "support-desk"


async def requester_may_approve(settings: AgentLedgerConfig, tenant: str) -> None:
    """The tenant's policy lets whoever asked for a run approve its calls (an operator's
    choice: by default another person must)."""
    async with RunClient.lazy(settings) as operator:
        await operator.tenants.set_policy(tenant, {"requester_may_approve": True})


EDITED = "Our refund policy: 30 days, no questions asked."


@pytest.mark.parametrize("era", ["2026-07-28", "legacy"])
async def test_an_approver_decides_through_elicitation_and_the_call_ends_with_the_receipt(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path, era: str
) -> None:
    tenant = tenant_name()
    # A key that may both start a run and decide it: an admin's, of a tenant that lets a
    # requester approve their own run's calls.
    admin = await make_key(settings, tenant, "admin")
    await requester_may_approve(settings, tenant)
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    elicit = accept(decision="approve", body=EDITED)
    told: list[tuple[float, str | None]] = []

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        told.append((progress, message))

    async with worker(), served(settings, tmp_path) as door:
        async with mcp_client(door.url, admin, elicitation_callback=elicit, mode=era) as mcp:
            assert mcp.protocol_version == ("2025-11-25" if era == "legacy" else era)
            [tool] = (await mcp.list_tools()).tools
            assert tool.name == AGENT and tool.input_schema["required"] == ["task"]
            assert set(tool.input_schema["properties"]) == {"task", "priority"}
            result = await mcp.call_tool(AGENT, {"task": NOTIFY_TASK}, progress_callback=heard)
            data = result.structured_content
            assert not result.is_error and data["status"] == "completed", result
            run_id = data["run_id"]
            receipt_text = await mcp.read_resource(f"agentledger://runs/{run_id}/receipt")
    await tool_sets.leave(pool, settings.task_queue, "w")

    [form] = elicit.asked
    assert "send_message" in form.message
    fields = form.requested_schema["properties"]
    assert fields["decision"]["enum"] == ["approve", "reject"]
    assert fields["to"]["default"] == "ana@example.com"
    assert "waiting for approval of send_message" in [m for _, m in told]
    steps = [d for d, _ in told]
    assert steps == sorted(set(steps)), "progress only grows, across the call's rounds"
    assert data["receipt"] == f"{door.url}/v1/runs/{run_id}/receipt"
    assert "send_message approved by " + identity(admin) in said(result)
    receipt = await receipt_of(pool, run_id)
    [approval] = receipt["approvals"]
    assert approval["by"] == identity(admin) and approval["edit"] == {"body": EDITED}
    assert run_id in read_text(receipt_text)


async def test_without_a_form_the_call_says_the_run_waits_and_it_completes_after_an_inbox_approval(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    """A client that shows no forms, even with a key that may decide, is told the run
    waits for approval and where; so is a runner's client that shows forms (a runner
    cannot decide). The run completes once an approver decides in the inbox."""
    tenant, other = tenant_name(), tenant_name()
    admin = await make_key(settings, tenant, "admin")
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    stranger = await make_key(settings, other, "admin")
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    elicit = accept(decision="approve")
    async with worker(), served(settings, tmp_path) as door:
        async with mcp_client(door.url, runner, elicitation_callback=elicit) as mcp:
            told = await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
        assert told.structured_content["status"] == "waiting_for_approval", told
        assert not elicit.asked, "no form for a runner"
        async with mcp_client(door.url, admin) as mcp:  # no elicitation callback
            waiting = await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
        data = waiting.structured_content
        assert data["status"] == "waiting_for_approval", waiting
        assert data["inbox"] == f"{door.url}/inbox" and data["approval"]["tool"] == "send_message"
        assert "inbox" in said(waiting)
        run_id = data["run_id"]
        # Another tenant's credential does not reach the run, as a missing one does not.
        async with mcp_client(door.url, stranger) as foreign:
            with pytest.raises(MCPError, match="no run") as found:
                await foreign.read_resource(f"agentledger://runs/{run_id}/events")
            with pytest.raises(MCPError, match="no run") as missing:
                await foreign.read_resource(f"agentledger://runs/run-{other}~x/events")
        assert found.value.code == missing.value.code
        # The inbox's own call, with the approver's key.
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            approved = await http.post(
                f"/v1/runs/{run_id}/approve",
                json={"action_hash": data["approval"]["action_hash"]},
                headers=bearer(approver),
            )
            assert approved.status_code == 200, approved.text
        async with mcp_client(door.url, runner) as mcp:
            for _ in range(120):
                listed = await mcp.list_resources()
                uris = [r.uri for r in listed.resources]
                if f"agentledger://runs/{run_id}/receipt" in uris:
                    break
                await asyncio.sleep(0.5)
            events = await mcp.read_resource(f"agentledger://runs/{run_id}/events")
    await tool_sets.leave(pool, settings.task_queue, "w")
    assert '"approval.approved"' in read_text(events)
    receipt = await receipt_of(pool, run_id)
    assert receipt["outcome"] == "completed"
    assert receipt["approvals"][0]["by"] == identity(approver)


async def test_a_tasks_client_gets_the_run_as_a_task_that_outlives_the_server_and_approves_it(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    """A runner's call, from a client of the Tasks extension, is a task at once; the server
    is SIGKILLed and started again; the runner's poll finds the task working, its approval
    waiting in the inbox (no form: a runner cannot decide); an approver's client, polling
    the same task, is asked with the form in `inputRequests`, answers with tasks/update, and
    polls it to completion."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    tasks = Tasks()
    elicit = accept(decision="approve")
    async with worker():
        async with served(settings, tmp_path) as door:
            async with mcp_client(door.url, runner, extensions=[Tasks()]) as mcp:
                created = await mcp.session.call_tool(
                    AGENT, {"task": NOTIFY_TASK}, allow_claimed=True
                )
            door.kill()
            await door.process.wait()
        assert isinstance(created, CreatedTask) and created.status == "working"
        task_id = created.task_id
        assert task_id.startswith(f"run-{tenant}~mcp.")
        async with served(settings, tmp_path) as door:
            async with mcp_client(door.url, runner, extensions=[Tasks()]) as mcp:
                asking = GetTask(params=TaskParams(task_id=task_id))
                for _ in range(120):
                    polled = await mcp.session.send_request(asking, DetailedTask)
                    if "waits for approval" in (polled.status_message or ""):
                        break
                    await asyncio.sleep(0.5)
            assert polled.status == "working" and not polled.input_requests
            assert f"{door.url}/inbox" in (polled.status_message or "")
            async with mcp_client(
                door.url, approver, extensions=[tasks], elicitation_callback=elicit
            ) as mcp:
                context = ClaimContext(
                    session=mcp.session, tool_name=AGENT, read_timeout_seconds=None
                )
                result = await tasks.resolve(created, context)
    await tool_sets.leave(pool, settings.task_queue, "w")
    states = [t.status for t in tasks.seen]
    assert "input_required" in states and states[-1] == "completed", states
    assert result.structured_content is not None
    assert result.structured_content["run_id"] == task_id
    assert result.structured_content["status"] == "completed"
    [form] = elicit.asked
    assert "send_message" in form.message
    receipt = await receipt_of(pool, task_id)
    assert receipt["approvals"][0]["by"] == identity(approver)


async def test_a_session_agents_tool_call_ends_with_its_turns_answer(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    """A session agent's run stays open after its answer: the call ends with the turn's
    answer (status waiting_for_message), and so does its task for a Tasks client."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    profiles = tmp_path / "agents.yaml"
    profiles.write_text(SESSION_PROFILE)
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    env = {"AGENTLEDGER_AGENTS": str(profiles)}
    async with worker(), served(settings, tmp_path, env=env) as door:
        async with mcp_client(door.url, runner) as mcp:
            answered = await mcp.call_tool("concierge", {"task": "Tell me about refunds."})
        async with mcp_client(door.url, runner, extensions=[Tasks()]) as mcp:
            as_task = await mcp.call_tool("concierge", {"task": "Tell me about exchanges."})
    await tool_sets.leave(pool, settings.task_queue, "w")
    for result in (answered, as_task):
        data = result.structured_content
        assert data is not None and data["status"] == "waiting_for_message", result
        assert data["answer"] and f"/v1/runs/{data['run_id']}/turns" in said(result)


async def test_the_protocols_page_mcp_client_and_assistant_config_work_as_written(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    worker: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant = tenant_name()
    admin = await make_key(settings, tenant, "admin")
    await requester_may_approve(settings, tenant)
    namespace: dict[str, Any] = {}
    block = doc_block("python", "def refund_through_mcp(")
    exec(compile(block, "docs/protocols.md", "exec"), namespace)
    config = json.loads(doc_block("json", '"mcpServers"'))["mcpServers"]["agentledger"]
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    async with worker(), served(settings, tmp_path) as door:
        answer = await namespace["refund_through_mcp"](door.url, admin)
        # The assistant's entry, as an assistant reads it: the URL, and its headers as given
        # (the page's URL and key swapped for this server's and a real key).
        url = config["url"].replace("http://127.0.0.1:8321", door.url)
        assert config["type"] == "http" and url == f"{door.url}/mcp"
        headers = {
            name: value.replace("ark_0123456789abcdef_YOUR-KEY", admin)
            for name, value in config["headers"].items()
        }
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as assistant,
        ):
            assert [t.name for t in (await assistant.list_tools()).tools] == [AGENT]
    await tool_sets.leave(pool, settings.task_queue, "w")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "tools: ['support-desk']"
    assert any(line.startswith("asks: Approve send_message") for line in printed)
    assert any(line.startswith("step ") for line in printed)
    assert printed[-1].startswith("completed - completed in ")
    assert "send_message approved by key:" in printed[-1]
    assert "## Summary" in answer


async def test_mcp_refuses_bad_credentials_and_bad_input_saying_what_is_wrong(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, client: TemporalClient, tmp_path: Path
) -> None:
    """Before a worker is involved: each refusal names the problem, and none starts a run;
    a call whose run no worker serves says at once that it is queued."""
    tenant = tenant_name()
    viewer = await make_key(settings, tenant, "viewer")
    runner = await make_key(settings, tenant, "runner")
    modern = {
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=30) as http:
            bare = await http.post("/mcp", content=b"{}", headers=modern)
            assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
            forged = await http.post(
                "/mcp",
                content=b"{}",
                headers={**modern, **bearer("ark_0000000000000000_" + "x" * 43)},
            )
            assert forged.status_code == 401, forged.text
            garbled = await http.post(
                "/mcp",
                content=b'{"jsonrpc": "2.0", "id": 1, "method"',
                headers={**modern, **bearer(runner)},
            )
            assert garbled.json()["error"]["code"] == -32700, garbled.text
            huge = await http.post(
                "/mcp", content=b"x" * 2_000_000, headers={**modern, **bearer(runner)}
            )
            assert huge.status_code == 413, huge.text
            # A handshake-era session belongs to the credential that opened it.
            legacy = {k: v for k, v in modern.items() if k != "MCP-Protocol-Version"}
            hello = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
            opened = await http.post("/mcp", json=hello, headers={**legacy, **bearer(runner)})
            assert opened.status_code == 200, opened.text
            session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            borrowed = await http.post(
                "/mcp", json=listing, headers={**legacy, **session, **bearer(viewer)}
            )
            assert borrowed.status_code == 404, borrowed.text

        async with mcp_client(door.url, viewer) as mcp:
            assert [t.name for t in (await mcp.list_tools()).tools] == [AGENT]
            with pytest.raises(MCPError, match="forbidden: tools/call needs the runner role"):
                await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
        async with mcp_client(door.url, runner) as mcp:
            for arguments, says in [
                ({}, "takes `task`"),
                ({"task": 42}, "takes `task`"),
                ({"task": "x" * 30_000}, "task"),
                ({"task": NOTIFY_TASK, "tenant": "other"}, "the tenant is your credential's"),
                ({"task": NOTIFY_TASK, "agent": "other"}, r"unknown field\(s\) agent"),
                ({"task": NOTIFY_TASK, "priority": 9}, "priority"),
            ]:
                with pytest.raises(MCPError, match=says) as refused:
                    await mcp.session.call_tool(AGENT, arguments)
                assert refused.value.code == -32602, refused.value.message
            with pytest.raises(MCPError, match="no agent 'nobody'"):
                await mcp.call_tool("nobody", {"task": NOTIFY_TASK})
            with pytest.raises(MCPError, match="requestState is not one this server gave"):
                await mcp.session.call_tool(
                    AGENT, {"task": NOTIFY_TASK}, request_state="{not json", input_responses={}
                )
            with pytest.raises(MCPError, match="no such resource"):
                await mcp.read_resource("file:///etc/passwd")
            # The Tasks extension's methods are for clients that declare it.
            with pytest.raises(MCPError, match="Missing required client capability") as bare:
                await mcp.session.send_request(
                    GetTask(params=TaskParams(task_id=f"run-{tenant}~x")), DetailedTask
                )
            assert bare.value.code == -32021
            # With no worker serving the queue, a call says its run is queued at once.
            names = agentledger.demo.registry.names()
            await tool_sets.join(pool, settings.task_queue, "w", names)
            queued = await mcp.call_tool(AGENT, {"task": NOTIFY_TASK})
            await tool_sets.leave(pool, settings.task_queue, "w")
    data = queued.structured_content
    assert data is not None and data["status"] == "queued", queued
    assert "worker" in said(queued)

    async def started() -> list[str]:
        listed = client.list_workflows(f"WorkflowId STARTS_WITH 'run-{tenant}'")
        return [w.id async for w in listed]

    # That run alone: none of the refused calls started one.
    assert await eventually(started, what="the queued run listed") == [data["run_id"]]
