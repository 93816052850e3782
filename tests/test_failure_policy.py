"""The failure policy table, row by row: what the run does, what the mirror records."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel

import agentledger.demo
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion, offline_planner
from agentledger.tools import Tool, ToolContext, ToolForbidden, ToolRegistry
from tests import client_ops as ops
from tests.support import (
    eventually,
    make_spec,
    rows,
    run_result,
    scripted,
    wait_mirrored_status,
    wait_pending,
    wait_status,
)

SUMMARY = "## Summary\nDone."


def recording(responder):
    """Wrap a responder to note when each request arrived (monotonic seconds)."""
    arrivals: list[float] = []

    def respond(request):
        arrivals.append(time.monotonic())
        return responder(request)

    respond.arrivals = arrivals  # type: ignore[attr-defined]
    return respond


async def result_of(client, run_id):
    return await run_result(client, run_id)


async def events_of(pool, run_id):
    found = await rows(pool, "SELECT type, data FROM events WHERE run_id = %s ORDER BY seq", run_id)
    return [(e["type"], e["data"]) for e in found]


# ---------------------------------------------------------------- model timeouts and fallback


async def test_timeouts_switch_to_the_fallback_model_as_a_recorded_event(
    client, settings, pool, worker
):
    def respond(request):
        if request["model"] == "primary":
            return Reply(completion(request, content=SUMMARY).body, delay_seconds=3)
        return offline_planner(request)

    spec = make_spec(
        "Summarize the invoice policy.",
        allowed_tools=["search_notes"],
        model={"model": "primary"},
        timeouts={"model_seconds": 1, "heartbeat_seconds": 5, "initial_retry_seconds": 0.1},
        failures={"fallback_model": "backup", "model_attempts_before_fallback": 2},
    )
    with OfflineModelServer(respond) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    asked = [r["model"] for r in model.requests]
    assert asked[:2] == ["primary", "primary"] and set(asked[2:]) == {"backup"}
    fallback = [d for t, d in await events_of(pool, started.run_id) if t == "model.fallback"]
    assert len(fallback) == 1 and fallback[0]["from"] == "primary"
    assert fallback[0]["to"] == "backup"
    # The client's timeout or Temporal's start-to-close timeout, whichever fires first.
    assert fallback[0]["reason"] in {"ProviderUnavailable", "Timeout"}
    steps = await rows(
        pool,
        "SELECT name, status FROM steps WHERE run_id = %s AND type = 'model_call' ORDER BY seq",
        started.run_id,
    )
    assert steps[0] == {"name": "primary", "status": "failed"}
    assert {s["status"] for s in steps[1:]} == {"completed"}


# ---------------------------------------------------------------- rate limits and 5xx


async def test_rate_limits_wait_what_retry_after_says(client, settings, pool, worker):
    calls = {"n": 0}

    def respond(request):
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(
                {"error": {"message": "slow down"}}, status=429, headers={"retry-after": "2"}
            )
        return offline_planner(request)

    responder = recording(respond)
    spec = make_spec("Summarize the invoice policy.", allowed_tools=["search_notes"])
    with OfflineModelServer(responder) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    waited = responder.arrivals[1] - responder.arrivals[0]
    assert 2.0 <= waited < 6.0, f"waited {waited:.2f}s; Retry-After said 2s (backoff is 0.2s)"
    attempts = await rows(
        pool,
        "SELECT attempt, status, error FROM step_attempts WHERE run_id = %s"
        " ORDER BY step_id, attempt LIMIT 2",
        started.run_id,
    )
    assert attempts[0]["status"] == "failed" and attempts[0]["error"].startswith("RateLimited")
    assert attempts[1]["status"] == "succeeded"


async def test_a_dropped_connection_is_retried(client, settings, pool, worker):
    calls = {"n": 0}

    def respond(request):
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply({}, drop_connection=True)
        return offline_planner(request)

    spec = make_spec("Summarize the invoice policy.", allowed_tools=["search_notes"])
    with OfflineModelServer(respond) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    retries = (await ops.receipt(pool, started.run_id))["retries"]
    assert "ProviderUnavailable" in retries[0]["reason"]


# ---------------------------------------------------------------- malformed output


async def test_malformed_tool_json_gets_one_stricter_reask(client, settings, pool, worker):
    def respond(request):
        done = sum(1 for m in request["messages"] if m.get("role") == "assistant")
        if done == 0:
            body = completion(request, content=None).body
            body["choices"][0]["message"]["tool_calls"] = [
                {
                    "id": "call_bad",
                    "type": "function",
                    "function": {"name": "search_notes", "arguments": "{query: oops"},
                }
            ]
            body["choices"][0]["finish_reason"] = "tool_calls"
            return Reply(body)
        return completion(request, content=SUMMARY)

    spec = make_spec("anything", allowed_tools=["search_notes"])
    with OfflineModelServer(respond) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    reask = model.requests[1]["messages"][-1]
    assert reask["role"] == "user" and "could not be used" in reask["content"]
    kinds = [t for t, _ in await events_of(pool, started.run_id)]
    assert kinds.count("model.repair_requested") == 1


async def test_output_that_stays_malformed_fails_the_step_safely(client, settings, pool, worker):
    spec = make_spec("anything", allowed_tools=["search_notes"])
    with OfflineModelServer(lambda request: completion(request, content="  ")) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "failed"
    assert "stayed malformed after 1 repair attempt" in (result.error or "")
    assert len(model.requests) == 2


# ---------------------------------------------------------------- invalid tool arguments


async def test_invalid_arguments_go_back_to_the_model_and_never_run(client, settings, pool, worker):
    bad = [("send_message", {"to": "ana@example.com"})]  # no subject, no body
    good = [("send_message", {"to": "ana@example.com", "subject": "Hi", "body": "Hello"})]
    spec = make_spec("notify ana", approval={"require_at_or_above": "high", "always": []})
    reported = "## Summary\nDone.\n\n## Actions\n- Sent a message to ana@example.com."
    with OfflineModelServer(scripted(bad, good, reported)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            assert pending.arguments == good[0][1], "only the revised call reaches approval"
            await ops.approve(client, started.run_id, by="li", role="approver")
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    told = model.requests[1]["messages"][-1]
    assert told["role"] == "tool" and "failed validation" in told["content"]
    assert len(await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id)) == 1


async def test_arguments_that_keep_failing_end_the_run(client, settings, pool, worker):
    bad = [("search_notes", {"query": ""})]
    spec = make_spec("x", allowed_tools=["search_notes"], failures={"argument_repairs": 2})
    with OfflineModelServer(scripted(bad)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await result_of(client, started.run_id)
    assert result.status.value == "failed"
    assert "kept failing validation after 2 re-asks" in (result.error or "")
    ran = await rows(
        pool, "SELECT 1 FROM steps WHERE run_id = %s AND type = 'tool_call'", started.run_id
    )
    assert ran == [], "the tool never ran with bad arguments"


# ---------------------------------------------------------------- permission denied


async def test_a_refused_key_pauses_for_an_admin_with_the_reason(client, settings, pool, worker):
    key_fixed = {"yes": False}

    def respond(request):
        if not key_fixed["yes"]:
            return Reply({"error": {"message": "bad key"}}, status=401)
        return offline_planner(request)

    spec = make_spec("Summarize the invoice policy.", allowed_tools=["search_notes"])
    with OfflineModelServer(respond) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            state = await wait_status(client, started.run_id, "paused")
            assert "refused the credentials" in (state.pause_reason or "")
            assert len(model.requests) == 1, "a 401 is never retried blindly"
            mirrored = await wait_mirrored_status(pool, started.run_id, "paused")
            assert "refused the credentials" in (mirrored["pause_reason"] or "")
            key_fixed["yes"] = True  # the admin fixes the key, then resumes
            await ops.control(client, started.run_id, "resume", by="admin")
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"


class Nothing(BaseModel):
    pass


async def test_a_forbidden_tool_pauses_for_an_admin(client, settings, pool, worker):
    granted = {"yes": False}

    async def read_secrets(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
        if not granted["yes"]:
            raise ToolForbidden("the service account lacks vault:read")
        return {"secret_count": 3}

    registry = ToolRegistry(
        [*agentledger.demo.registry.tools(), Tool("read_secrets", "read", Nothing, read_secrets)]
    )
    spec = make_spec("read", allowed_tools=["read_secrets"])
    with OfflineModelServer(scripted([("read_secrets", {})], SUMMARY)) as model:
        async with worker(registry=registry, base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            state = await wait_status(client, started.run_id, "paused")
            assert "vault:read" in (state.pause_reason or "")
            granted["yes"] = True
            await ops.control(client, started.run_id, "resume")
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    tool_steps = await rows(
        pool,
        "SELECT status FROM steps WHERE run_id = %s AND type = 'tool_call' ORDER BY seq",
        started.run_id,
    )
    assert [s["status"] for s in tool_steps] == ["failed", "completed"]
    attempts = await rows(
        pool,
        "SELECT count(*) AS n FROM step_attempts WHERE run_id = %s AND error LIKE 'forbidden%%'",
        started.run_id,
    )
    assert attempts == [{"n": 1}], "no retry of a forbidden call"


# ---------------------------------------------------------------- prompt injection


@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_suspected_injection_is_quarantined_for_review(
    client, settings, pool, worker, decision
):
    fetch = [("fetch_page", {"url": "https://example.com/forum/post-7"})]
    spec = make_spec("read the forum", allowed_tools=["fetch_page"])
    with OfflineModelServer(scripted(fetch, SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            assert pending.kind == "quarantine"
            assert "ignore-instructions" in pending.arguments["patterns"]
            assert len(model.requests) == 1, "the model has not seen the page"
            if decision == "approve":
                await ops.approve(client, started.run_id, by="li", role="approver")
            else:
                await ops.reject(client, started.run_id, by="li", role="approver", reason="evil")
            result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    shown = model.requests[1]["messages"][-1]["content"]
    if decision == "approve":
        assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in shown
    else:
        assert "IGNORE" not in shown and "quarantined" in shown
    kinds = [t for t, _ in await events_of(pool, started.run_id)]
    assert "tool.suspicious" in kinds


# ---------------------------------------------------------------- budgets


async def test_an_exceeded_budget_pauses_for_approval_showing_the_spend(
    client, settings, pool, worker
):
    spec = make_spec(
        "Summarize the invoice policy.",
        allowed_tools=["search_notes"],
        budget={"max_tokens": 50},
    )
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        assert pending.kind == "budget"
        assert pending.arguments["spent_tokens"] > 50 and pending.arguments["max_tokens"] == 50
        await ops.approve(
            client, started.run_id, by="li", role="approver", edit={"max_tokens": 100_000}
        )
        result = await result_of(client, started.run_id)
    assert result.status.value == "completed"
    approval = (await ops.receipt(pool, started.run_id))["approvals"][0]
    assert approval["kind"] == "budget" and approval["edit"] == {"max_tokens": 100_000}


async def test_a_budget_not_extended_ends_the_run(client, settings, pool, worker):
    spec = make_spec("Summarize.", allowed_tools=["search_notes"], budget={"max_cost_usd": 1e-6})
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.reject(client, started.run_id, by="li", role="approver", reason="too much")
        result = await result_of(client, started.run_id)
    assert result.status.value == "cancelled"
    assert "cost budget exceeded" in (result.error or "")
    await eventually(
        lambda: rows(pool, "SELECT 1 FROM receipts WHERE run_id = %s", started.run_id),
        what="receipt",
    )
