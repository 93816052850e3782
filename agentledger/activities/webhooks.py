"""Signed webhook deliveries, and a run's changes for those who deliver them.

`webhooks.deliver` makes one attempt: it reads the subscription (URL, secret, format,
credentials) from Postgres, signs the body (agentledger.core.webhook_signatures), POSTs it
and records the attempt. A subscription in the `slack` format is sent the body as a Slack
message (agentledger.core.slack_messages, its inbox link on the door's `public_url`),
signed the same way; the delivery's record keeps agentledger's body. A receiver's 2xx is
delivered; a 5xx, 408, 429 or a connection that failed is raised for Temporal to retry with
its backoff (the workflow's retry policy is the only retry loop); any other 4xx fails the
delivery for good. A subscription removed meanwhile
drops it. The receiver may see a delivery twice (an attempt that landed but whose answer
was lost): `AgentLedger-Delivery` names it, the same on every attempt.

`webhooks.run_changes` waits, heartbeating, for a run's next events in the mirror (a page at
a time, so a notifier that starts late or falls behind catches up in bounded payloads);
`webhooks.tenant_subscriptions` lists a tenant's webhooks with no run, where its
tenant-wide notices go (its runs' notifications, budget alerts), read when each is told: one
added meanwhile hears the next.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentledger.core.constants import (
    ACTIVITY_RUN_CHANGES,
    ACTIVITY_TENANT_SUBSCRIPTIONS,
    ACTIVITY_WEBHOOK_DELIVER,
)
from agentledger.core.events import EventType
from agentledger.core.slack_messages import slack_message
from agentledger.core.task_states import receipt_summary
from agentledger.core.webhook_models import (
    ChangesInput,
    DeliveryInput,
    DeliveryResult,
    RunChanges,
    RunEventRow,
    TenantInput,
    TenantSubscription,
)
from agentledger.core.webhook_signatures import SIGNATURE_HEADER, sign
from agentledger.store.webhook_store import WebhookStore

# One attempt's bound: a receiver that takes longer is tried again later.
ATTEMPT_SECONDS = 10.0
POLL_SECONDS = 0.5
# A run's events read at once: a page of them stays far below Temporal's payload limit.
EVENTS_PAGE = 200
RETRIED_STATUSES = frozenset({408, 425, 429})


class WebhookActivities:
    def __init__(
        self,
        store: WebhookStore,
        http: Callable[[], httpx.AsyncClient] = lambda: httpx.AsyncClient(
            timeout=ATTEMPT_SECONDS, follow_redirects=False
        ),
        public_url: str | None = None,
    ) -> None:
        self.store = store
        self.http = http
        # The door's address as people reach it: Slack messages link to the inbox there.
        self.public_url = public_url

    @activity.defn(name=ACTIVITY_WEBHOOK_DELIVER)
    async def deliver(self, input: DeliveryInput) -> DeliveryResult:
        target = await self.store.target(input.subscription_id)
        if target is None:
            return DeliveryResult(status="dropped", attempts=0)
        attempts = await self.store.attempt(
            delivery_id=input.delivery_id,
            subscription_id=input.subscription_id,
            tenant=input.tenant,
            run_id=input.run_id,
            event=input.event,
            body=input.body,
        )
        body = input.body
        if target["format"] == "slack":
            body = slack_message(input.event, input.body, self.public_url)
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "agentledger-webhooks",
            "AgentLedger-Delivery": input.delivery_id,
            "AgentLedger-Event": input.event,
            SIGNATURE_HEADER: sign(target["secret"], raw, now=time.time()),
        }
        if target["auth_scheme"] and target["auth_credentials"]:
            headers["Authorization"] = f"{target['auth_scheme']} {target['auth_credentials']}"
        try:
            async with self.http() as http:
                response = await http.post(target["url"], content=raw, headers=headers)
        except httpx.HTTPError as err:
            why = f"{type(err).__name__}: {err}"[:500]
            await self.store.outcome(
                input.delivery_id, status="retrying", status_code=None, error=why
            )
            raise ApplicationError(f"delivery {input.delivery_id}: {why}") from err
        code = response.status_code
        if 200 <= code < 300:
            await self.store.outcome(
                input.delivery_id, status="delivered", status_code=code, error=None
            )
            return DeliveryResult(status="delivered", attempts=attempts, status_code=code)
        why = f"the receiver answered {code}: {response.text[:200]}"
        final = 400 <= code < 500 and code not in RETRIED_STATUSES
        await self.store.outcome(
            input.delivery_id, status="failed" if final else "retrying", status_code=code, error=why
        )
        raise ApplicationError(f"delivery {input.delivery_id}: {why}", non_retryable=final)

    @activity.defn(name=ACTIVITY_RUN_CHANGES)
    async def run_changes(self, input: ChangesInput) -> RunChanges:
        """The run's events after `after_seq`, waiting up to `wait_seconds` for one; with the
        receipt's summary once the run has ended."""
        deadline = time.monotonic() + input.wait_seconds
        while True:
            rows = await self.store.events_after(input.run_id, input.after_seq, EVENTS_PAGE)
            receipt = await self.store.receipt(input.run_id) if not rows else None
            if rows or receipt is not None or time.monotonic() > deadline:
                break
            activity.heartbeat(input.after_seq)
            await asyncio.sleep(POLL_SECONDS)
        events = [RunEventRow.model_validate(row) for row in rows]
        if receipt is None and any(e.type == EventType.RUN_FINISHED for e in events):
            receipt = await self.store.receipt(input.run_id)
        if receipt is None:
            return RunChanges(events=events)
        summary = {"text": receipt_summary(receipt), "outcome": receipt.get("outcome")}
        return RunChanges(events=events, ended=True, summary=summary)

    @activity.defn(name=ACTIVITY_TENANT_SUBSCRIPTIONS)
    async def tenant_subscriptions(self, input: TenantInput) -> list[TenantSubscription]:
        rows = await self.store.subscriptions(input.tenant, None)
        return [
            TenantSubscription(subscription_id=r["subscription_id"], name=r["name"]) for r in rows
        ]
