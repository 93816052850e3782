"""A2A on the real stack, driven by the `a2a-sdk`'s own client over HTTP: `agentledger serve`
in a subprocess, a worker, keys in Postgres, a push receiver on loopback.

A task streams to `input-required` (the run's approval); the server is SIGKILLed and
started again; the task is resubscribed after the last event seen, the approval is sent
as a reply by an approver, and the resubscribed stream reads the rest exactly once, to
the task completed with its answer as an artifact. The push subscriber got each change of
state, signed; another tenant's key finds no such task."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger import RunClient
from agentledger.client.receipts import receipt_of
from agentledger.core import webhook_signatures
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
from tests.support import NOTIFY_TASK, rows
from tests.webhook_support import Receiver

pytest.importorskip("a2a.client", reason="the a2a extra")
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format, struct_pb2

AGENT = "support-desk"
SECRET = "push-secret-" + "s" * 20


async def a2a_client(url: str, key: str, *, streaming: bool = True) -> Any:
    """The SDK's client for the agent, its card read with the key (cards are per tenant)."""
    http = httpx.AsyncClient(headers=bearer(key), timeout=90)
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return await create_client(f"{url}/a2a/{AGENT}", client_config=config)


def seq_of(event: StreamResponse) -> int | None:
    if not event.HasField("status_update"):
        return None
    meta = json_format.MessageToDict(event.status_update.metadata)
    return int(meta["agentledger"]["seq"])


def state_of(event: StreamResponse) -> str:
    if event.HasField("task"):
        return TaskState.Name(event.task.status.state)
    if event.HasField("status_update"):
        return TaskState.Name(event.status_update.status.state)
    return ""


def decision(**data: Any) -> Part:
    return Part(data=json_format.ParseDict(data, struct_pb2.Value()))


async def test_an_a2a_task_survives_a_killed_server_and_is_approved_by_reply(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    tenant, other = tenant_name(), tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    stranger = await make_key(settings, other, "admin")
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    # The receiver fails its first two attempts: the first delivery lands on the third.
    with Receiver(failures=2) as receiver:
        async with worker():
            async with served(settings, tmp_path) as door:
                # The card is the tenant's: its skills, the door's Bearer scheme.
                async with httpx.AsyncClient() as http:
                    cards = await http.get(
                        f"{door.url}/.well-known/agent-card.json", headers=bearer(runner)
                    )
                    bare = await http.get(f"{door.url}/.well-known/agent-card.json")
                assert bare.status_code == 401
                assert cards.status_code == 200, cards.text
                card = cards.json()
                assert card["name"] == AGENT and card["capabilities"]["pushNotifications"]
                assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == (
                    "bearer"
                )

                client = await a2a_client(door.url, runner)
                message = Message(
                    message_id=f"m-{uuid.uuid4().hex[:8]}",
                    context_id="ctx-refunds",
                    role=Role.ROLE_USER,
                    parts=[Part(text=NOTIFY_TASK)],
                )
                push = TaskPushNotificationConfig(id="hook", url=receiver.url, token=SECRET)
                request = SendMessageRequest(
                    message=message,
                    configuration=SendMessageConfiguration(task_push_notification_config=push),
                )
                first = [event async for event in client.send_message(request)]
                assert first[0].HasField("task")
                task_id = first[0].task.id
                assert task_id == f"run-{tenant}~a2a.{message.message_id}"
                assert first[0].task.context_id == "ctx-refunds"
                assert state_of(first[-1]) == "TASK_STATE_INPUT_REQUIRED"
                asked = first[-1].status_update.status.message
                data = json_format.MessageToDict(asked.parts[1].data)
                assert data["tool"] == "send_message" and data["required_role"] == "approver"
                seen = [s for s in map(seq_of, first) if s is not None]
                # The same message again is the same task.
                again = [event async for event in client.send_message(request)]
                assert again[0].task.id == task_id
                door.kill()
                await door.process.wait()

            async with served(settings, tmp_path) as door:
                watcher = await a2a_client(door.url, runner)
                resumed = watcher.subscribe(
                    SubscribeToTaskRequest(id=task_id),
                    context=ClientCallContext(service_parameters={"Last-Event-ID": str(seen[-1])}),
                )
                snapshot = await anext(resumed)
                assert state_of(snapshot) == "TASK_STATE_INPUT_REQUIRED"

                # A runner's reply cannot decide; another tenant finds no such task.
                reply = SendMessageRequest(
                    message=Message(
                        message_id=f"r-{uuid.uuid4().hex[:8]}",
                        task_id=task_id,
                        role=Role.ROLE_USER,
                        parts=[decision(decision="approve")],
                    )
                )
                with pytest.raises(Exception, match="403"):
                    [e async for e in (await a2a_client(door.url, runner)).send_message(reply)]
                foreign = await a2a_client(door.url, stranger)
                with pytest.raises(TaskNotFoundError, match="no run"):
                    await foreign.get_task(GetTaskRequest(id=task_id))

                deciding = await a2a_client(door.url, approver, streaming=False)
                [answered] = [e async for e in deciding.send_message(reply)]
                assert state_of(answered) == "TASK_STATE_COMPLETED"
                rest = [event async for event in resumed]

        assert state_of(rest[-1]) == "TASK_STATE_COMPLETED"
        told = seen + [s for s in map(seq_of, rest) if s is not None]
        assert told == list(range(1, told[-1] + 1)), "every event once, in order"
        artifacts = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
        assert [a.name for a in artifacts] == ["answer.md"]
        assert "## Summary" in artifacts[0].parts[0].text
        summary = rest[-1].status_update.status.message.parts[0].text
        assert "completed" in summary and "send_message approved by key:" in summary

        # The push subscriber was told each change of state, signed with its token.
        states: list[str] = []
        for count in range(1, 10):
            # A notifier's wait for the run's events that the stopped worker held is taken
            # up again after its heartbeat timeout (20 s): on a loaded machine, past 30 s.
            delivered = await receiver.wait_for(count, seconds=90)
            each = delivered[count - 1]
            header = each.headers["agentledger-signature"]
            stamp = webhook_signatures.verify(SECRET, each.body, header, now=time.time())
            assert abs(stamp - each.at) < 30
            body = json_format.ParseDict(json.loads(each.body), StreamResponse())
            assert body.status_update.task_id == task_id
            states.append(TaskState.Name(body.status_update.status.state))
            if states[-1] == "TASK_STATE_COMPLETED":
                break
        assert "TASK_STATE_INPUT_REQUIRED" in states and states[-1] == "TASK_STATE_COMPLETED"
        assert all(a != b for a, b in itertools.pairwise(states)), states
        with pytest.raises(webhook_signatures.BadSignature):
            webhook_signatures.verify("another-secret-0000", each.body, header, now=time.time())

    await tool_sets.leave(pool, settings.task_queue, "w")
    receipt = await receipt_of(pool, task_id)
    [approval] = receipt["approvals"]
    assert approval["by"] == identity(approver)
    recorded = await rows(
        pool,
        "SELECT status, attempts FROM webhook_deliveries WHERE run_id = %s ORDER BY created_at",
        task_id,
    )
    assert [r["attempts"] for r in recorded] == [3] + [1] * (len(recorded) - 1)
    assert all(r["status"] == "delivered" for r in recorded)
    assert len(receiver.deliveries) == len(recorded) + 2


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_a2a_takes_role_and_tenant_from_the_credential_alone(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """Before a worker or a run is involved: a viewer cannot start, a runner cannot decide,
    no key is 401, another tenant's task and an unknown agent read as missing, and a
    request naming a tenant is refused."""
    tenant, other = tenant_name(), tenant_name()
    viewer = await make_key(settings, tenant, "viewer")
    runner = await make_key(settings, tenant, "runner")
    stranger = await make_key(settings, other, "admin")
    text = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Refund order 42"}]}
    reply = {**text, "taskId": f"run-{tenant}~a2a.m1", "parts": [{"data": {"decision": "approve"}}]}
    version = {"A2A-Version": "1.0"}
    async with served(settings, tmp_path) as door, httpx.AsyncClient(base_url=door.url) as http:
        endpoint = f"/a2a/{AGENT}"
        for key, body, status in [
            (viewer, rpc("SendMessage", {"message": text}), 403),
            (viewer, rpc("SendStreamingMessage", {"message": text}), 403),
            (runner, rpc("SendMessage", {"message": reply}), 403),
            (viewer, rpc("CancelTask", {"id": reply["taskId"]}), 403),
            (None, rpc("GetTask", {"id": reply["taskId"]}), 401),
        ]:
            headers = {**version, **(bearer(key) if key else {})}
            answered = await http.post(endpoint, json=body, headers=headers)
            assert answered.status_code == status, (body["method"], answered.text)
        assert (
            await http.post("/a2a/nobody", json=rpc("GetTask", {}), headers=bearer(runner))
        ).status_code == 404
        card = await http.get("/a2a/nobody/.well-known/agent-card.json", headers=bearer(runner))
        assert card.status_code == 404
        # Another tenant's task id reads as not found, as a missing one does.
        foreign = await http.post(
            endpoint,
            json=rpc("GetTask", {"id": reply["taskId"]}),
            headers={**version, **bearer(stranger)},
        )
        missing = await http.post(
            endpoint,
            json=rpc("GetTask", {"id": f"run-{other}~a2a.nothing"}),
            headers={**version, **bearer(stranger)},
        )
        assert foreign.json()["error"]["code"] == missing.json()["error"]["code"] == -32001
        smuggled = await http.post(
            endpoint,
            json=rpc("SendMessage", {"message": text, "tenant": other}),
            headers={**version, **bearer(runner)},
        )
        assert "credential" in smuggled.json()["error"]["message"]


async def test_the_protocols_page_conversation_runs_as_written(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    worker: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    namespace: dict[str, Any] = {}
    exec(compile(doc_block("python", "def refund("), "docs/protocols.md", "exec"), namespace)
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    async with worker(), served(settings, tmp_path) as door:
        answer = await namespace["refund"](door.url, runner, approver)
    await tool_sets.leave(pool, settings.task_queue, "w")
    printed = capsys.readouterr().out.splitlines()
    assert "TASK_STATE_INPUT_REQUIRED" in printed
    assert "asks: send_message ana@example.com" in printed
    assert printed[-1].startswith("TASK_STATE_COMPLETED - completed in ")
    assert "send_message approved by key:" in printed[-1]
    assert "## Summary" in answer


async def test_an_a2a_context_is_a_session_whose_messages_are_its_turns(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    """For an agent whose profile makes sessions, the first message of a context starts the
    session run; the next messages of the context, with the task's id or without, are its
    turns (the same task, `input-required` with each answer); another context is another
    session."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    profiles = tmp_path / "agents.yaml"
    profiles.write_text(SESSION_PROFILE)
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())

    async def say(agent: Any, text: str, context: str, task_id: str = "") -> list[StreamResponse]:
        message = Message(
            message_id=f"m-{uuid.uuid4().hex[:8]}",
            context_id=context,
            task_id=task_id,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        )
        return [event async for event in agent.send_message(SendMessageRequest(message=message))]

    env = {"AGENTLEDGER_AGENTS": str(profiles)}
    async with worker(), served(settings, tmp_path, env=env) as door:
        http = httpx.AsyncClient(headers=bearer(runner), timeout=90)
        agent = await create_client(
            f"{door.url}/a2a/concierge", client_config=ClientConfig(httpx_client=http)
        )
        first = await say(agent, "Tell me about refunds.", "chat-1")
        task_id = first[0].task.id
        second = await say(agent, "And exchanges?", "chat-1")
        third = await say(agent, "And gift cards?", "chat-1", task_id=task_id)
        other = await say(agent, "Tell me about refunds.", "chat-2")
        got = await agent.get_task(GetTaskRequest(id=task_id))
        await http.aclose()
        async with RunClient.lazy(settings) as operator:
            state = await operator.runs.status(task_id)
    await tool_sets.leave(pool, settings.task_queue, "w")

    assert second[0].task.id == third[0].task.id == task_id, "one context, one session"
    assert other[0].task.id != task_id, "another context, another session"
    for turn in (first, second, third):
        last = turn[-1].status_update
        assert TaskState.Name(last.status.state) == "TASK_STATE_INPUT_REQUIRED"
        assert json_format.MessageToDict(last.metadata)["agentledger"]["event"] == (
            "session.turn_answered"
        )
        assert last.status.message.parts[0].text, "the turn's answer"
    # Each turn's stream tells that turn alone: it starts after its own message.
    told = [json_format.MessageToDict(e.status_update.metadata) for e in second[1:]]
    assert [t["agentledger"]["event"] for t in told].count("session.turn_answered") == 1
    assert TaskState.Name(got.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert got.status.message.parts[0].text == third[-1].status_update.status.message.parts[0].text
    assert [turn.turn for turn in state.turns] == [1, 2, 3]
