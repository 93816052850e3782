"""A tenant's notification webhooks, on the real stack: a receiver gets `approval.requested`
within 2 s of the request, signed; one that answers 500 twice gets the same delivery on the
third try (recorded: attempts, status); then `approval.decided` and `run.finished`. Another
tenant's webhook hears nothing of these runs."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.webhooks import SIGNATURE_HEADER, verify
from tests.http_support import tenant_name
from tests.support import NOTIFY_TASK, eventually, wait_pending
from tests.test_crash_recovery import start_worker_process
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
