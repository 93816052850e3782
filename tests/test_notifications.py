"""A tenant's notification webhooks, on the real stack: a receiver gets `approval.requested`
within 2 s of the request, signed; one that answers 500 twice gets the same delivery on the
third try (recorded: attempts, status); then `approval.decided` and `run.finished`. Another
tenant's webhook hears nothing of these runs. A Slack-format webhook gets a message Slack
takes, with a button to the inbox item; runs that workflows start (sub-agents, backlog
tasks, schedules' fires) are told as any run; an eval case's run pages nobody; a delivery
that failed for good is made again on request."""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment

from agentledger import RunClient
from agentledger.activities.run_notices import RunNotices
from agentledger.cli.notifications_cli import NO_LINK
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.eval_cases import case_key, eval_workflow_id
from agentledger.core.events import EventType
from agentledger.core.notifications import inbox_item
from agentledger.core.webhook_models import run_notifier_id
from agentledger.core.wire import MirrorBatch, RunEvent
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.webhook_store import WebhookStore
from agentledger.webhooks import SIGNATURE_HEADER, verify
from agentledger.workflows.child_runs import child_run_id
from tests import client_ops as ops
from tests.backlog_support import item, new_agent, tasks
from tests.http_support import bearer, make_key, served, tenant_name
from tests.support import NOTIFY_TASK, eventually, make_spec, mirror_batch, rows, wait_pending
from tests.test_cli import run_cli
from tests.test_crash_recovery import start_worker_process
from tests.test_subagents import delegating_model, parent_spec
from tests.webhook_support import Receiver


def events(receiver: Receiver) -> list[str]:
    return [json.loads(d.body)["event"] for d in receiver.accepted()]


async def test_a_tenants_webhooks_hear_of_approvals_and_ends(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, client: Client, worker: Any
) -> None:
    tenant, other = tenant_name(), tenant_name()
    ours = settings.model_copy(update={"tenant": tenant})
    with Receiver() as steady, Receiver(failures=2) as flaky, Receiver() as elsewhere:
        async with RunClient.lazy(ours) as admin:
            made = await admin.notifications.subscribe("ops", steady.url)
            await admin.notifications.subscribe("pager", flaky.url, secret="p" * 32)
            assert [s.name for s in await admin.notifications.listed()] == ["ops", "pager"]
        async with RunClient.lazy(settings.model_copy(update={"tenant": other})) as theirs:
            await theirs.notifications.subscribe("ops", elsewhere.url)
        async with worker(), RunClient.lazy(ours) as runner:
            started = await runner.runs.start(NOTIFY_TASK)
            pending = await wait_pending(client, started.run_id, seconds=60)
            [told] = await steady.wait_for(1)
            body = json.loads(told.body)
            assert (body["event"], body["run_id"], body["tool"]) == (
                "approval.requested",
                started.run_id,
                "send_message",
            )
            assert told.at - pending.requested_at.timestamp() < 2.0, "told within 2 s"
            verify(made.secret, told.body, told.headers[SIGNATURE_HEADER.lower()], now=time.time())
            # 500 twice, then the same delivery on the third try.
            await flaky.wait_for(1)
            assert [d.answered for d in flaky.deliveries[:3]] == [500, 500, 200]
            ids = {d.headers["agentledger-delivery"] for d in flaky.deliveries[:3]}
            assert len(ids) == 1

            async def recorded() -> Any:
                found = await runner.notifications.deliveries("pager")
                return found if found and found[0].status == "delivered" else None

            [first, *_] = await eventually(recorded, what="the delivery recorded")
            assert (first.event, first.attempts, first.last_status_code) == (
                "approval.requested",
                3,
                200,
            )
            await runner.runs.approve(started.run_id, by="li", role="approver")
            try:
                await steady.wait_for(3, seconds=60)
            except AssertionError as err:
                raise AssertionError(f"{err}: {events(steady)}") from None
            assert events(steady) == ["approval.requested", "approval.decided", "run.finished"]
            decided = json.loads(steady.accepted()[1].body)
            assert decided["decision"] == "approved" and decided["by"] == "li"
    assert elsewhere.deliveries == []


async def test_a_delivery_under_way_when_its_worker_is_killed_is_not_lost(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, client: Client, worker: Any
) -> None:
    """The worker making the delivery is SIGKILLed while the receiver holds the request; a
    worker started afterwards makes it again (Temporal's attempt timed out), and it lands."""
    tenant = tenant_name()
    ours = settings.model_copy(update={"tenant": tenant})
    with Receiver(hangs=1) as slow:
        async with RunClient.lazy(ours) as admin:
            await admin.notifications.subscribe("ops", slow.url)
            doomed = await start_worker_process(settings, "doomed")
            try:
                started = await admin.runs.start(NOTIFY_TASK)

                async def held() -> bool:
                    return bool(slow.arrived)

                await eventually(held, seconds=60, what="the first attempt to arrive")
                doomed.send_signal(signal.SIGKILL)
                assert await doomed.wait() == -signal.SIGKILL
            finally:
                if doomed.returncode is None:
                    doomed.kill()
                    await doomed.wait()
            async with worker():
                [told] = await slow.wait_for(1, seconds=60)
                assert json.loads(told.body)["event"] == "approval.requested"
                assert json.loads(told.body)["run_id"] == started.run_id
                await admin.runs.cancel(started.run_id)


REFUND_TASK = (
    'Refund order 42: call look_up_order {"order_id": 42} '
    'call refund_order {"order_id": 42, "cents": 1999}'
)
DOOR = "https://agents.example.com"


def slack_shape(message: dict[str, Any]) -> list[str]:
    """What Slack's incoming webhooks would refuse in `message` (Block Kit's rules for the
    blocks used here): none, for a message Slack takes."""
    problems = []
    if not isinstance(message.get("text"), str) or not message["text"]:
        problems.append("no text")
    blocks = message.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= 50:
        return [*problems, "blocks: a list of 1 to 50"]
    for block in blocks:
        kind = block.get("type")
        if kind == "section":
            text, fields = block.get("text"), block.get("fields", [])
            if text is None and not fields:
                problems.append("a section with neither text nor fields")
            for each in [text, *fields] if text else fields:
                if each.get("type") not in ("mrkdwn", "plain_text") or not each.get("text"):
                    problems.append(f"a text object without its type or text: {each}")
            if len(fields) > 10 or any(len(f["text"]) > 2000 for f in fields):
                problems.append("more than 10 fields, or one over 2000 characters")
            if text and len(text["text"]) > 3000:
                problems.append("a section's text over 3000 characters")
        elif kind == "actions":
            for button in block.get("elements", []):
                label = button.get("text", {})
                if button.get("type") != "button" or label.get("type") != "plain_text":
                    problems.append(f"not a button with a plain_text label: {button}")
                if not 0 < len(label.get("text", "")) <= 75:
                    problems.append("a button's label empty or over 75 characters")
                if not str(button.get("url", "")).startswith(("https://", "http://")):
                    problems.append(f"a button without an http(s) url: {button}")
        elif kind != "context":
            problems.append(f"a block this message should not have: {kind}")
    return problems


async def test_a_slack_webhook_gets_a_message_with_a_button_to_the_inbox_item(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """A subscription in the Slack format (made with the console script, which says the
    link needs the door's address) gets what a Slack incoming webhook takes, signed as any
    delivery: the refund in words with its agent and risk, and a button to its card in the
    inbox at the door's public address (the workers' AGENTLEDGER_PUBLIC_URL)."""
    tenant = tenant_name()
    with Receiver() as slack:
        added = await run_cli(
            settings, tmp_path, "notifications", "add", "chat", slack.url, "--format", "slack",
            "--tenant", tenant, console=True,
        )  # fmt: skip
        assert added.code == 0, added.err
        assert NO_LINK in " ".join(added.out.split()), added.out
        secret = added.out.split("secret (shown this once): ")[1].split()[0]
        async with RunClient.lazy(settings.model_copy(update={"tenant": tenant})) as admin:
            [listed] = await admin.notifications.listed()
            assert (listed.name, listed.format) == ("chat", "slack")
        spec = make_spec(
            REFUND_TASK,
            tenant=tenant,
            agent="refunds",
            allowed_tools=["look_up_order", "refund_order"],
        )
        async with worker(settings=settings.model_copy(update={"public_url": DOOR})):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id, seconds=60)
            [told] = await slack.wait_for(1)
            await client.get_workflow_handle(started.run_id).cancel()
    verify(secret, told.body, told.headers[SIGNATURE_HEADER.lower()], now=time.time())
    assert told.headers["agentledger-event"] == "approval.requested"
    message = json.loads(told.body)
    assert slack_shape(message) == []
    assert (
        message["text"] == "Approval needed: Refund $19.99 on order 42 (agent refunds, risk high)"
    )
    [section, *_] = message["blocks"]
    assert "Refund $19.99 on order 42" in section["text"]["text"]
    [button] = [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert button["url"] == DOOR + inbox_item(started.run_id, pending.approval_id)


async def test_runs_that_workflows_start_are_told_as_any_run(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, client: Client, worker: Any
) -> None:
    """A tenant's webhook hears of runs no client started: a parent started by the engine
    itself and its two sub-agents' child runs, a backlog's task and a schedule's fire; each
    end told once, naming its run and agent."""
    tenant = tenant_name()
    agent = new_agent("notified")
    with Receiver() as hook, OfflineModelServer(delegating_model()) as model:
        async with RunClient.lazy(settings.model_copy(update={"tenant": tenant})) as admin:
            await admin.notifications.subscribe("ops", hook.url)
            async with worker(base_url=model.base_url):
                parent = await ops.start_run(
                    client, parent_spec(tenant=tenant), task_queue=settings.task_queue
                )
                await admin.backlogs.enqueue(agent, [item("k1")])
                await admin.schedules.create("daily", task="Look it up.", every=3600, paused=True)
                await admin.schedules.trigger("daily")
                await hook.wait_for(5, seconds=60)
                await admin.schedules.delete("daily")
        children = (await ops.receipt(pool, parent.run_id))["children"]
        [task] = await tasks(pool, agent)
        [fire] = await rows(pool, "SELECT run_id FROM schedule_fires WHERE tenant = %s", tenant)
    told = [json.loads(d.body) for d in hook.accepted()]
    ends = {t["run_id"]: t["agent"] for t in told if t["event"] == "run.finished"}
    assert set(ends) == {parent.run_id, *children, task["run_id"], fire["run_id"]}, told
    assert [ends[parent.run_id], *(ends[child] for child in children)] == ["lead", "alpha", "beta"]
    assert len(told) == 5, "each end told once"


async def test_a_runs_first_notice_starts_its_one_notifier_and_an_eval_case_pages_nobody(
    pool: AsyncConnectionPool, client: Client
) -> None:
    """The mirror write that holds a run's first notice starts its notifier (one per run:
    a write again joins it, and once it has ended starts none); a write with nothing to
    tell, a tenant without webhooks and an eval case's run start none."""
    tenant, quiet = tenant_name(), tenant_name()
    await WebhookStore(pool).subscribe(
        subscription_id=f"{tenant}.ops", tenant=tenant, run_id=None, name="ops",
        url="http://127.0.0.1:9/hook", secret="s" * 32,
    )  # fmt: skip
    notices = RunNotices(WebhookStore(pool), client)
    at = datetime.now(UTC)

    def written(run_id: str, event: str, whose: str = tenant) -> MirrorBatch:
        batch = mirror_batch(run_id, fence=3)
        return batch.model_copy(
            update={
                "run": batch.run.model_copy(update={"tenant": whose, "agent": "refunds"}),
                "events": [RunEvent(seq=3, type=EventType(event), at=at)],
            }
        )

    async def notifier(run_id: str) -> Any:
        try:
            return await client.get_workflow_handle(run_notifier_id(run_id)).describe()
        except RPCError:
            return None

    run = f"run-{tenant}~notified"
    case = child_run_id(eval_workflow_id(tenant, "e1"), case_key("e1", "c1"))
    env = ActivityEnvironment()
    await env.run(notices.written, written(run, "step.completed"))
    await env.run(notices.written, written(case, "approval.requested"))
    await env.run(notices.written, written(f"run-{quiet}~q", "run.finished", quiet))
    assert await notifier(run) is None and await notifier(case) is None
    assert await notifier(f"run-{quiet}~q") is None
    await env.run(notices.written, written(run, "approval.requested"))
    await env.run(notices.written, written(run, "approval.requested"))  # a retried write
    first = await notifier(run)
    assert first is not None and first.status == WorkflowExecutionStatus.RUNNING
    await client.get_workflow_handle(run_notifier_id(run)).terminate("the test's end")
    await env.run(notices.written, written(run, "run.finished"))
    again = await notifier(run)
    assert again.run_id == first.run_id, "an ended notifier is not started again"


async def test_a_delivery_that_failed_for_good_is_made_again_on_request(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """A receiver that answered 410 failed the delivery for good; once it is fixed, the
    tenant's admin has it made again over HTTP: the recorded body under the same delivery
    id, signed afresh, and its record reads delivered. Another tenant's admin asking for it,
    and a delivery the webhook never had, read as missing."""
    tenant, other = tenant_name(), tenant_name()
    admin_key = await make_key(settings, tenant, "admin")
    other_key = await make_key(settings, other, "admin")
    with Receiver(failures=1, failure_code=410) as fixed:
        async with RunClient.lazy(settings.model_copy(update={"tenant": tenant})) as admin:
            made = await admin.notifications.subscribe("ops", fixed.url)
            async with worker(), served(settings, tmp_path) as door:
                started = await ops.start_run(
                    client, make_spec(tenant=tenant), task_queue=settings.task_queue
                )

                async def failed() -> Any:
                    found = await admin.notifications.deliveries("ops")
                    return [d for d in found if d.status == "failed"]

                [lost] = await eventually(failed, seconds=60, what="a delivery failed for good")
                assert (lost.event, lost.last_status_code) == ("approval.requested", 410)
                again = f"/v1/notifications/ops/deliveries/{quote(lost.delivery_id, safe='')}"
                async with httpx.AsyncClient(base_url=door.url, timeout=30) as http:
                    theirs = await http.post(again + "/redeliver", headers=bearer(other_key))
                    assert theirs.status_code == 404, theirs.text
                    unknown = "/v1/notifications/ops/deliveries/nope/redeliver"
                    none = await http.post(unknown, headers=bearer(admin_key))
                    assert none.status_code == 404, none.text
                    asked = await http.post(again + "/redeliver", headers=bearer(admin_key))
                    assert asked.status_code == 202, asked.text
                assert (asked.json()["delivery_id"], asked.json()["status"]) == (
                    lost.delivery_id,
                    "pending",
                )
                [took] = await fixed.wait_for(1)

                async def delivered() -> Any:
                    found = await admin.notifications.deliveries("ops")
                    return [d for d in found if d.delivery_id == lost.delivery_id and
                            d.status == "delivered"]  # fmt: skip

                [record] = await eventually(delivered, what="the redelivery recorded")
                await client.get_workflow_handle(started.run_id).cancel()
    assert (record.attempts, record.last_status_code) == (2, 200)
    assert took.headers["agentledger-delivery"] == lost.delivery_id
    assert json.loads(took.body)["run_id"] == started.run_id
    verify(made.secret, took.body, took.headers[SIGNATURE_HEADER.lower()], now=time.time())
