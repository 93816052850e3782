"""`deploy check` replays the runs open on the server against this checkout's code: the same
code passes, and a planted nondeterministic change fails, naming each run and its event."""

from __future__ import annotations

from temporalio.client import Client

from agentledger.client import deploy_check
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.engine import ENGINE_WORKFLOWS
from tests import client_ops as ops
from tests.planted_change import PlantedAgentRun
from tests.support import eventually, make_spec, wait_pending
from tests.test_cli import run_cli


async def test_deploy_check_passes_today_s_code_and_names_a_planted_change(
    client: Client, settings, worker, tmp_path
):
    queue = settings.task_queue
    async with worker():
        waiting = [await ops.start_run(client, make_spec(), task_queue=queue) for _ in range(2)]
        done = await ops.start_run(client, make_spec(), task_queue=queue)
        for each in [*waiting, done]:
            await wait_pending(client, each.run_id)
        await ops.approve(client, done.run_id, by="maria", role="approver")
        await ops.result(client, done.run_id)

    async def listed() -> bool:  # visibility follows the server's writes within moments
        found = await deploy_check.check(client, task_queue=queue, closed=1)
        return len(found.verdicts) == 3

    await eventually(listed, what="the three runs to be listed")
    # No worker runs now: the check replays here.
    seen: list[str] = []
    report = await deploy_check.check(
        client, task_queue=queue, closed=1, progress=lambda v: seen.append(v.workflow_id)
    )
    assert report.passed, report.failed
    assert sorted(seen) == sorted(r.run_id for r in [*waiting, done])
    assert {v.workflow_id: v.open for v in report.verdicts} == {
        waiting[0].run_id: True,
        waiting[1].run_id: True,
        done.run_id: False,
    }

    # The same through the command line, with no worker either.
    checked = await run_cli(settings, tmp_path, "deploy", "check", "--closed", "1", "--json")
    assert checked.code == 0, checked.err
    assert checked.json()["passed"] is True and len(checked.json()["verdicts"]) == 3
    shown = await run_cli(settings, tmp_path, "deploy", "check")
    assert shown.code == 0 and shown.out.count("ok   run-") == 2, shown.out

    planted = [PlantedAgentRun if w is AgentRunWorkflow else w for w in ENGINE_WORKFLOWS]
    broken = await deploy_check.check(client, task_queue=queue, workflows=planted, closed=1)
    assert not broken.passed
    assert {v.workflow_id for v in broken.failed} == {r.run_id for r in [*waiting, done]}
    for verdict in broken.failed:
        assert verdict.error and verdict.error.startswith("[TMPRL1100] Nondeterminism"), (
            verdict.error
        )
        assert verdict.event_id is not None and verdict.event_id > 0, verdict.error


async def test_deploy_check_of_a_quiet_queue_finds_nothing_to_replay(client: Client, settings):
    report = await deploy_check.check(client, task_queue=settings.task_queue, closed=5)
    assert report.verdicts == [] and report.passed
