"""Model failures are classified once: some retry with backoff, some end the run at once."""

from __future__ import annotations

from agentledger.core.errors import NotAnswered
from agentledger.dev.offline_model import OfflineModelServer, Reply, offline_planner
from tests import client_ops as ops
from tests.support import eventually, make_spec, rows, run_result
from tests.test_cli import run_cli


def failing(status: int, times: int, headers: dict[str, str] | None = None):
    calls = {"n": 0}

    def respond(request):
        calls["n"] += 1
        if calls["n"] <= times:
            return Reply(
                {"error": {"message": f"injected {status}"}}, status=status, headers=headers or {}
            )
        return offline_planner(request)

    return respond


async def run(client, settings, worker, responder, **spec_fields):
    with OfflineModelServer(responder) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec(
                "Summarize the invoice policy.", allowed_tools=["search_notes"], **spec_fields
            )
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            return started.run_id, await run_result(client, started.run_id), list(model.requests)


async def test_server_errors_are_retried_and_recorded(client, settings, pool, worker):
    run_id, result, requests = await run(client, settings, worker, failing(500, times=2))
    assert result.status.value == "completed"
    assert len(requests) == 2 + 2, "two failures, then the two calls of a normal run"
    retries = (await ops.receipt(pool, run_id))["retries"]
    assert len(retries) == 1 and retries[0]["attempts"] == 3
    assert "ProviderUnavailable" in retries[0]["reason"]


async def test_exhausted_retries_fail_the_run_with_the_cause(client, settings, pool, worker):
    run_id, result, requests = await run(
        client,
        settings,
        worker,
        failing(503, times=99),
        timeouts={"max_attempts": 2, "initial_retry_seconds": 0.1},
    )
    assert result.status.value == "failed"
    assert "model.complete failed" in (result.error or "")
    assert len(requests) == 2
    receipt = await ops.receipt(pool, run_id)
    assert receipt["error"] == result.error
    assert receipt["retries"][0]["attempts"] == 2


async def test_status_shows_the_retrying_call_and_why(client, settings, pool, worker, tmp_path):
    """While the provider fails, `status` names the call in flight, its attempt, the last
    failure and the next try, from Temporal alone."""
    with OfflineModelServer(failing(503, times=99)) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec(
                "Summarize the invoice policy.",
                timeouts={"initial_retry_seconds": 30, "max_attempts": 5},
            )
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)

            async def retrying():
                try:
                    report = await ops.inspect(client, started.run_id, mirror=pool)
                except NotAnswered:
                    # A loaded machine can hold the new worker's first workflow task past
                    # inspect's own bound; status says so and is asked again, as its advice says.
                    return None
                calls = [a for a in report.in_flight if a.activity == "model.complete"]
                return calls[0] if calls and calls[0].attempt >= 2 else None

            call = await eventually(retrying, seconds=60, what="the model call's second attempt")
            assert "503" in (call.last_failure or "") and call.state == "scheduled"
            assert call.next_attempt_at is not None
            shown = await run_cli(settings, tmp_path, "status", started.run_id)
            assert "in flight: model.complete, attempt 2, scheduled" in shown.out
            assert "next try at" in shown.out and "503" in shown.out
            as_json = await run_cli(settings, tmp_path, "status", started.run_id, "--json")
            assert as_json.json()["in_flight"][0]["attempt"] == 2
            await ops.cancel(client, started.run_id)


async def test_a_provider_that_never_answers_is_named_before_the_step_times_out(
    client, settings, pool, worker
):
    """A provider that holds the request open: the attempt gives up just inside the step's
    timeout and says why, rather than leaving Temporal to say only that the step timed out."""

    def silent(request):
        return Reply({"error": {"message": "never sent"}}, status=500, delay_seconds=30)

    run_id, result, _ = await run(
        client,
        settings,
        worker,
        silent,
        timeouts={"model_seconds": 4, "max_attempts": 1, "heartbeat_seconds": 2},
    )
    assert result.status.value == "failed"
    assert "no complete answer within 2 s" in (result.error or ""), result.error
    [attempt] = await rows(
        pool, "SELECT status, error FROM step_attempts WHERE run_id = %s", run_id
    )
    assert attempt["status"] == "failed" and "ProviderUnavailable" in attempt["error"]


async def test_what_the_openai_sdk_would_retry_is_retried_after_the_delay_asked(
    client, settings, pool, worker
):
    """A 409 (a lock timeout, which the OpenAI SDK retries) is no longer final: Temporal
    tries again after the `retry-after-ms` the provider sent."""
    run_id, result, requests = await run(
        client,
        settings,
        worker,
        failing(409, times=1, headers={"retry-after-ms": "200"}),
        timeouts={"initial_retry_seconds": 30},
    )
    assert result.status.value == "completed", result.error
    assert len(requests) == 1 + 2, "one failure, then the two calls of a normal run"
    [retry] = (await ops.receipt(pool, run_id))["retries"]
    assert retry["attempts"] == 2 and "409" in retry["reason"]


async def test_a_provider_that_says_do_not_retry_fails_the_call_at_once(
    client, settings, pool, worker
):
    _, result, requests = await run(
        client, settings, worker, failing(503, times=99, headers={"x-should-retry": "false"})
    )
    assert result.status.value == "failed"
    assert "x-should-retry: false" in (result.error or ""), result.error
    assert len(requests) == 1, "no second attempt"
