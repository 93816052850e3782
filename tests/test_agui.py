"""AG-UI on the real stack: `agentledger serve` in a subprocess, a worker, keys in Postgres, and
`httpx` as the AG-UI client. A thread's run reaches an approval, which ends the AG-UI run with
an interrupt; the client resumes it with an edit, and the run completes. Every event is read
with the `ag-ui-protocol` package's own pydantic types, and each AG-UI run's sequence is
checked by `ag-ui-validate` (the protocol's conformance rules)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger.core.config import AgentLedgerConfig
from agentledger.store import tool_sets
from tests import client_ops as ops
from tests.http_support import bearer, make_key, served
from tests.support import NOTIFY_TASK, rows

ag_ui = pytest.importorskip("ag_ui.core", reason="ag-ui-protocol is the serve extra")
from ag_ui.core import Event, RunAgentInput  # noqa: E402
from ag_ui_validate.pytest_plugin import validate_agui  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

EVENT: TypeAdapter[Any] = TypeAdapter(Event)
AGENT = "support-desk"


def tenant_name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def identity(key: str) -> str:
    """Who a key's decisions are recorded as: `key:<its id>` (`ark_<id>_<secret>`)."""
    return "key:" + key.split("_")[1]


def run_input(thread: str, *, resume: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body = RunAgentInput(
        thread_id=thread,
        run_id=f"agui-{uuid.uuid4().hex[:8]}",
        messages=[{"id": "m1", "role": "user", "content": NOTIFY_TASK}],
        resume=resume,
    )
    return json.loads(body.model_dump_json(by_alias=True))


async def agui_run(http: httpx.AsyncClient, body: dict[str, Any], key: str) -> list[Any]:
    """One AG-UI run: its events, each parsed as the protocol's types, checked as a sequence."""
    events: list[Any] = []
    raw: list[str] = []
    async with http.stream(
        "POST", f"/v1/agents/{AGENT}/agui", json=body, headers=bearer(key)
    ) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                raw.append(line[5:].strip())
                events.append(EVENT.validate_json(raw[-1]))
    report = validate_agui(raw)
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert not errors, errors
    return events


def of_type(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type.value == kind]


async def test_an_agui_thread_is_interrupted_for_approval_and_resumed_with_an_edit(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    tenant, other = tenant_name(), tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    stranger = await make_key(settings, other, "admin")
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    # The worker's tools, as a worker process records them: a profile's run names tools.
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=90) as http:
            first = await agui_run(http, run_input(thread), runner)
            started, *_, finished = first
            assert started.type.value == "RUN_STARTED" and started.thread_id == thread
            assert finished.type.value == "RUN_FINISHED"
            assert finished.outcome.type == "interrupt"
            [interrupt] = finished.outcome.interrupts
            assert interrupt.reason == "tool_approval"
            assert interrupt.metadata["agentledger"]["risk"] == "high"
            # The call waiting for approval was announced, and the interrupt names it.
            calls = {e.tool_call_id: e.tool_call_name for e in of_type(first, "TOOL_CALL_START")}
            assert calls[interrupt.tool_call_id] == "send_message"
            assert "search_notes" in calls.values()
            [args] = [
                e
                for e in of_type(first, "TOOL_CALL_ARGS")
                if e.tool_call_id == interrupt.tool_call_id
            ]
            proposed = json.loads(args.delta)
            assert proposed["to"] == "ana@example.com"
            assert of_type(first, "TOOL_CALL_RESULT"), "the lookup's result was told"
            states = [e.snapshot["agentledger"] for e in of_type(first, "STATE_SNAPSHOT")]
            assert states[-1]["status"] == "waiting_for_approval"
            run_id = states[-1]["run_id"]
            assert run_id == f"run-{tenant}~agui.{thread}", "the thread names the run"

            # A client that went away comes back to the same run, and the same interrupt.
            back = await agui_run(http, run_input(thread), runner)
            assert back[-1].outcome.interrupts == [interrupt]
            assert of_type(back, "STATE_SNAPSHOT")[-1].snapshot["agentledger"]["run_id"] == run_id

            edit = {"body": "Edited over AG-UI."}
            answer = {
                "interruptId": interrupt.id,
                "status": "resolved",
                "payload": {"approved": True, "editedArgs": edit},
            }
            # Deciding is an approver's; another tenant's key does not find the thread.
            refused = await http.post(
                f"/v1/agents/{AGENT}/agui",
                json=run_input(thread, resume=[answer]),
                headers=bearer(runner),
            )
            assert refused.status_code == 403, refused.text
            foreign = await http.post(
                f"/v1/agents/{AGENT}/agui",
                json=run_input(thread, resume=[answer]),
                headers=bearer(stranger),
            )
            assert foreign.status_code == 404, foreign.text
            # Bad input is refused, naming what it takes, and decides nothing.
            bad = {**answer, "payload": {"approve": "yes"}}
            refused = await http.post(
                f"/v1/agents/{AGENT}/agui",
                json=run_input(thread, resume=[bad]),
                headers=bearer(approver),
            )
            assert refused.status_code == 400, refused.text
            assert '"approved": true|false' in refused.json()["error"]["message"]
            wrong = {**answer, "interruptId": "0001-nothing"}
            refused = await http.post(
                f"/v1/agents/{AGENT}/agui",
                json=run_input(thread, resume=[wrong]),
                headers=bearer(approver),
            )
            assert refused.status_code == 409 and interrupt.id in refused.text, refused.text

            second = await agui_run(http, run_input(thread, resume=[answer]), approver)
            assert second[0].type.value == "RUN_STARTED"
            done = second[-1]
            assert done.type.value == "RUN_FINISHED" and done.outcome.type == "success"
            assert done.result["run_id"] == run_id and "## Summary" in done.result["answer"]
            # The decision comes first, then the edited call runs as a call of its own.
            decided = [
                e.value
                for e in of_type(second, "CUSTOM")
                if e.name.startswith("agentledger.approval.")
            ]
            assert [d["data"]["by"] for d in decided] == [identity(approver)]
            assert decided[0]["step_id"] == interrupt.tool_call_id
            sent = [
                json.loads(e.delta)
                for e in of_type(second, "TOOL_CALL_ARGS")
                if e.tool_call_id != interrupt.tool_call_id
            ]
            assert sent == [{**proposed, **edit}]
            text = "".join(e.delta for e in of_type(second, "TEXT_MESSAGE_CONTENT"))
            assert "## Summary" in text, "the answer streamed as a text message"
            assert not of_type(second, "RUN_STARTED")[1:], "one AG-UI run per request"

            # A client that comes back to the thread is told the same run's story again.
            again = await agui_run(http, run_input(thread), runner)
            assert again[-1].outcome.type == "success"
            assert again[-1].result["answer"] == done.result["answer"]

    await tool_sets.leave(pool, settings.task_queue, "w")
    receipt = await ops.receipt(pool, run_id)
    [approval] = receipt["approvals"]
    assert approval["by"] == identity(approver) and approval["edit"] == edit
    outbox = await rows(pool, "SELECT body FROM outbox WHERE run_id = %s", run_id)
    assert outbox == [{"body": "Edited over AG-UI."}]
