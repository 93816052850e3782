"""Verification: declared checks decide whether a run may complete, and say why not."""

from __future__ import annotations

from agentledger.activities.verify import deterministic_checks
from agentledger.core.spec import VerifySpec
from agentledger.dev.offline_model import OfflineModelServer
from tests import client_ops as ops
from tests.support import make_spec, rows, run_result, scripted, wait_pending

GOOD = '## Summary\nTwo items.\n- a\n- b\n```json\n{"count": 2}\n```'
BAD = '## Summary\nThree items.\n- a\n- b\n- c\n```json\n{"count": "three"}\n```'
CHECKS = {
    "json_schema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
    },
    "counts": [{"name": "two bullets", "pattern": r"^- ", "equals": 2}],
}


async def run(client, settings, worker, model, spec):
    async with worker(base_url=model.base_url):
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        return started.run_id, await run_result(client, started.run_id)


def test_deterministic_checks_name_what_failed():
    spec = VerifySpec.model_validate(CHECKS)
    failed = {c.name: c.detail for c in deterministic_checks(BAD, spec) if not c.passed}
    assert failed == {
        "json schema": "count: 'three' is not of type 'integer'",
        "two bullets": "found 3, needs exactly 2",
    }
    assert all(c.passed for c in deterministic_checks(GOOD, spec))


async def test_a_failed_check_goes_back_to_the_model_then_passes(client, settings, pool, worker):
    spec = make_spec("count", allowed_tools=[], verify=CHECKS)
    with OfflineModelServer(scripted(BAD, GOOD)) as model:
        run_id, result = await run(client, settings, worker, model, spec)
    assert result.status.value == "completed" and result.answer == GOOD
    told = model.requests[1]["messages"][-1]["content"]
    assert "failed verification" in told and "found 3, needs exactly 2" in told
    verdicts = await rows(
        pool, "SELECT status FROM steps WHERE run_id = %s AND type = 'verify' ORDER BY seq", run_id
    )
    assert [v["status"] for v in verdicts] == ["failed", "passed"]
    receipt = await ops.receipt(pool, run_id)
    assert receipt["verification"]["passed"] is True


async def test_on_failure_fail_ends_the_run_at_once(client, settings, pool, worker):
    spec = make_spec("count", allowed_tools=[], verify={**CHECKS, "on_failure": "fail"})
    with OfflineModelServer(scripted(BAD, GOOD)) as model:
        run_id, result = await run(client, settings, worker, model, spec)
    assert result.status.value == "failed"
    assert "verification failed" in (result.error or "") and "two bullets" in result.error
    assert len(model.requests) == 1
    assert (await ops.receipt(pool, run_id))["verification"]["passed"] is False


async def test_an_llm_judge_uses_the_runs_model_client(
    client, settings, pool, worker, model_server
):
    passing = make_spec(
        "Look up our refund policy.",
        allowed_tools=["search_notes"],
        verify={"judge": {"rubric": 'The answer must quote "Refunds over $100".'}},
    )
    run_id, result = await run(client, settings, worker, model_server, passing)
    assert result.status.value == "completed"
    checks = (await ops.receipt(pool, run_id))["verification"]["checks"]
    assert checks[-1] == {
        "name": "judge",
        "passed": True,
        "detail": "every quoted requirement is met",
    }

    failing = make_spec(
        "Look up our refund policy.",
        allowed_tools=["search_notes"],
        verify={"judge": {"rubric": 'It must mention "chargebacks".'}, "max_rounds": 1},
    )
    run_id, result = await run(client, settings, worker, model_server, failing)
    assert result.status.value == "failed"
    assert "judge: missing ['chargebacks']" in (result.error or "")


async def test_a_tool_that_ran_adds_its_own_checks(client, settings, pool, worker):
    """send_message declares that the answer must report what was sent."""
    send = [("send_message", {"to": "ana@example.com", "subject": "Hi", "body": "Hello"})]
    silent = "## Summary\nAll done."
    honest = "## Summary\nAll done.\n\n## Actions\n- Sent a message to ana@example.com."
    spec = make_spec("notify ana", allowed_tools=["send_message"], approval={"always": []})
    with OfflineModelServer(scripted(send, silent, honest)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            await ops.approve(client, started.run_id, by="li", role="approver")
            result = await run_result(client, started.run_id)
    assert pending.tool == "send_message"
    assert result.status.value == "completed" and result.answer == honest
    told = model.requests[2]["messages"][-1]["content"]
    assert "send_message: answer reports the message" in told
