"""Unknown outcomes: an effect that may have happened is reconciled, never blindly repeated.
And a model response that arrived before a crash is reused, not paid for twice."""

from __future__ import annotations

import asyncio
import signal
import uuid

from pydantic import BaseModel

import agentledger.demo
from agentledger.core.results import Usage
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.model_journal import ModelJournal
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, rows, scripted, wait_pending
from tests.test_crash_recovery import start_worker_process

SUMMARY = "## Summary\nDone."
TICKET = [("create_ticket", {"title": "Printer on fire", "body": "Floor 3"})]
FAST = {"heartbeat_seconds": 2, "initial_retry_seconds": 0.2}


async def start_and_crash(client, settings, model, spec, faults: str) -> str:
    """Start a run on a worker armed with `faults`, and wait for that worker to die."""
    worker_settings = settings.model_copy(update=dict(openai_base_url=model.base_url))
    doomed = await start_worker_process(worker_settings, "doomed", faults=faults)
    try:
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        assert await asyncio.wait_for(doomed.wait(), 60) == -signal.SIGKILL
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
    return started.run_id


async def test_a_crash_after_an_external_effect_is_reconciled_not_repeated(
    client, settings, pool, worker
):
    with OfflineModelServer(scripted(TICKET, SUMMARY)) as model:
        spec = make_spec("open a ticket", allowed_tools=["create_ticket"], timeouts=FAST)
        run_id = await start_and_crash(
            client, settings, model, spec, "tool.after_external_effect:create_ticket"
        )
        ledger = await rows(pool, "SELECT status FROM tool_ledger WHERE run_id = %s", run_id)
        assert ledger == [{"status": "started"}], "the effect happened; its record did not"

        async with worker(base_url=model.base_url):
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await asyncio.wait_for(handle.result(), 60)

    assert result.status.value == "completed"
    tickets = await rows(pool, "SELECT id FROM tickets WHERE title = 'Printer on fire'")
    keys = await rows(
        pool,
        "SELECT status, reconciliation, duplicates_prevented FROM tool_ledger WHERE run_id = %s",
        run_id,
    )
    assert keys == [
        {"status": "done", "reconciliation": "happened (reconcile hook)", "duplicates_prevented": 1}
    ]
    assert len(tickets) >= 1
    per_key = await rows(
        pool,
        "SELECT count(*) AS n FROM tickets t JOIN tool_ledger l ON l.idempotency_key ="
        " t.external_key WHERE l.run_id = %s",
        run_id,
    )
    assert per_key == [{"n": 1}], "the ticket was opened exactly once"
    receipt = await ops.receipt(pool, run_id)
    assert receipt["side_effects"][0]["reconciliation"] == "happened (reconcile hook)"
    reconciled = await rows(
        pool, "SELECT 1 FROM events WHERE run_id = %s AND type = 'tool.reconciled'", run_id
    )
    assert len(reconciled) == 1


class Payload(BaseModel):
    text: str


async def test_without_a_reconcile_hook_a_person_decides(client, settings, pool, worker):
    """The first attempt posts, then its connection drops: did the post land? Ask a person."""
    posts: list[str] = []

    async def post_webhook(args: Payload, ctx: ToolContext) -> dict[str, str]:
        posts.append(args.text)
        if len(posts) == 1:
            raise ConnectionResetError("connection reset after the request was sent")
        return {"posted": args.text}

    registry = ToolRegistry(
        [
            *agentledger.demo.registry.tools(),
            Tool(
                "post_webhook", "post", Payload, post_webhook, side_effect=True, transactional=False
            ),
        ]
    )
    spec = make_spec("post it", allowed_tools=["post_webhook"], timeouts=FAST)
    with OfflineModelServer(scripted([("post_webhook", {"text": "hello"})], SUMMARY)) as model:
        async with worker(registry=registry, base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            assert pending.kind == "unknown_outcome"
            assert "no reconcile hook" in (pending.reason or "")
            state = await ops.status(client, started.run_id)
            assert state.status.value == "waiting_for_approval"
            # The person checked: the post did land. Rejecting means "do not repeat it".
            await ops.reject(client, started.run_id, by="li", role="approver", reason="it landed")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()

    assert result.status.value == "completed"
    assert posts == ["hello"], "never repeated"
    ledger = await rows(
        pool, "SELECT status, reconciliation FROM tool_ledger WHERE run_id = %s", started.run_id
    )
    assert ledger == [{"status": "done", "reconciliation": "happened (person)"}]


async def test_a_journaled_model_response_is_reused_after_a_crash(client, settings, pool, worker):
    with OfflineModelServer(scripted([("search_notes", {"query": "refund"})], SUMMARY)) as model:
        spec = make_spec("x", allowed_tools=["search_notes"], timeouts=FAST)
        run_id = await start_and_crash(client, settings, model, spec, "model.after_response")
        assert len(model.requests) == 1, "the response arrived, then the worker died"
        async with worker(base_url=model.base_url):
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
            result = await asyncio.wait_for(handle.result(), 60)

    assert result.status.value == "completed"
    assert len(model.requests) == 2, "first step reused from the journal; one more for the answer"
    journal = await rows(
        pool,
        "SELECT step_id, attempt, reused_by FROM model_journal WHERE run_id = %s ORDER BY step_id",
        run_id,
    )
    assert journal[0]["attempt"] == 1 and journal[0]["reused_by"] == 2
    receipt = await ops.receipt(pool, run_id)
    assert receipt["unaccepted_tokens"] == 0
    paid = await rows(
        pool,
        "SELECT sum(tokens_in + tokens_out) AS t FROM model_journal WHERE run_id = %s",
        run_id,
    )
    assert paid[0]["t"] == receipt["tokens_in"] + receipt["tokens_out"], "each call paid once"


async def test_responses_the_run_never_used_are_counted_as_unaccepted(pool):
    journal = ModelJournal(pool)
    run_id = f"run-unaccepted-{uuid.uuid4().hex[:8]}"
    for attempt, tokens in ((1, 100), (2, 40)):
        await journal.record(
            run_id=run_id,
            step_id="0001-model_call",
            attempt=attempt,
            model="m",
            response={},
            usage=Usage(input_tokens=tokens, output_tokens=0),
            cost_usd=0.001,
        )
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO steps (run_id, step_id, seq, type, name, status, output, attempt, final)
               VALUES (%s, '0001-model_call', 1, 'model_call', 'm', 'completed',
                       '{"journal_attempt": 2}', 2, true) ON CONFLICT DO NOTHING""",
            (run_id,),
        )
    assert await journal.unaccepted(run_id) == (100, 0.001)
