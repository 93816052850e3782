"""`client.notifications`: a tenant's notification webhooks, told, signed, what its runs do
(`approval.requested`, `approval.decided`, `run.finished`, `run.failed`), so a run that
needs a person does not wait until someone happens to look.

A subscription is a tenant-wide row of the webhook store (agentledger.store.webhook_store:
no run), its secret shown once when it is made, its `format` agentledger's JSON or a Slack
message (agentledger.core.slack_messages). Every run of its tenant, however it was
started, gets a notifier workflow (agentledger.workflows.run_notifier) once it has
something to tell (agentledger.activities.run_notices), which delivers, retried by
Temporal and recorded; `deliveries` reads what became of each, and `redeliver` makes one
again (agentledger.workflows.redeliveries).
"""

from __future__ import annotations

import secrets
from typing import get_args

from temporalio.common import WorkflowIDConflictPolicy

from agentledger.client.scope import Scope
from agentledger.core import bounds
from agentledger.core.constants import REDELIVERY_WORKFLOW_NAME
from agentledger.core.errors import InvalidRequest, PolicyDenied, RuleNotFound
from agentledger.core.keys import id_part
from agentledger.core.webhook_models import (
    DeliveryFormat,
    DeliveryInput,
    NewSubscription,
    PushSubscription,
    WebhookDelivery,
    redelivery_id,
)
from agentledger.store.webhook_store import WebhookStore

FORMATS: tuple[str, ...] = get_args(DeliveryFormat)

SCHEMES = ("http://", "https://")
MIN_SECRET_CHARS = 16


class Notifications:
    """The caller's tenant's notification webhooks: an admin's to add and remove."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _tenant(self, tenant: str | None) -> str:
        named = self.scope.acting_in(tenant)
        if named is None:
            raise InvalidRequest("name the tenant whose notifications these are (--tenant)")
        bounds.check_text("tenant", named)
        return named

    async def _store(self) -> WebhookStore:
        return WebhookStore(await self.scope.database())

    def _admin(self) -> None:
        if not self.scope.caller.may("admin"):
            raise PolicyDenied("a tenant's notification webhooks are its admins' to change")

    async def subscribe(
        self,
        name: str,
        url: str,
        *,
        secret: str | None = None,
        format: DeliveryFormat = "json",
        tenant: str | None = None,
    ) -> NewSubscription:
        """Tell `url` what the tenant's runs do from now on, signed with `secret` (a random
        one if not given), as agentledger's JSON or (`format="slack"`) as a Slack incoming
        webhook's message; the same name again replaces its settings."""
        named = self._tenant(tenant)
        self._admin()
        bounds.check_text("name", name)
        bounds.check_text("url", url)
        if not url.startswith(SCHEMES):
            raise InvalidRequest(f"a webhook URL takes http:// or https://, not {url[:80]!r}")
        if format not in FORMATS:
            raise InvalidRequest(
                f"a webhook's format is one of {', '.join(FORMATS)}, not {str(format)[:40]!r}"
            )
        secret = secret or secrets.token_urlsafe(32)
        if len(secret) < MIN_SECRET_CHARS:
            raise InvalidRequest(
                f"the secret signs each delivery: give one of at least {MIN_SECRET_CHARS} "
                "characters, or none for a random one"
            )
        row = await (await self._store()).subscribe(
            subscription_id=f"{named}.{id_part(name)}",
            tenant=named,
            run_id=None,
            name=name,
            url=url,
            secret=secret,
            format=format,
        )
        return NewSubscription.model_validate({**row, "secret": secret})

    async def listed(self, *, tenant: str | None = None) -> list[PushSubscription]:
        named = self._tenant(tenant)
        rows = await (await self._store()).subscriptions(named, None)
        return [PushSubscription.model_validate(row) for row in rows]

    async def remove(self, name: str, *, tenant: str | None = None) -> None:
        """Stop telling this subscriber (deliveries under way end at their next attempt)."""
        named = self._tenant(tenant)
        self._admin()
        if not await (await self._store()).unsubscribe(named, f"{named}.{id_part(name)}"):
            raise RuleNotFound(f"no notification webhook {name!r}")

    async def deliveries(self, name: str, *, tenant: str | None = None) -> list[WebhookDelivery]:
        """Each delivery to this subscriber: its event, status, attempts, last answer."""
        named = self._tenant(tenant)
        rows = await (await self._store()).deliveries(f"{named}.{id_part(name)}")
        # The subscription's id is the scope's tenant's own: its rows are that tenant's.
        return [WebhookDelivery.model_validate(row) for row in rows]

    async def redeliver(
        self, name: str, delivery_id: str, *, tenant: str | None = None
    ) -> WebhookDelivery:
        """Make this delivery again: its recorded body, under its id, signed afresh and
        retried as any delivery; it reads `pending` until its attempt says what came of it."""
        named = self._tenant(tenant)
        self._admin()
        bounds.check_text("delivery", delivery_id)
        store = await self._store()
        subscription_id = f"{named}.{id_part(name)}"
        if await store.target(subscription_id) is None:
            raise RuleNotFound(f"no notification webhook {name!r}")
        found = await store.delivery(subscription_id, delivery_id)
        if found is None:
            raise RuleNotFound(
                f"no delivery {delivery_id[:100]!r} to webhook {name!r}: "
                f"`notifications deliveries {name}` lists them"
            )
        again = DeliveryInput(
            delivery_id=delivery_id,
            subscription_id=subscription_id,
            tenant=named,
            run_id=found["run_id"],
            event=found["event"],
            body=found["body"],
        )
        client = await self.scope.temporal()
        # Pending first: what its attempt then records is the last word.
        pending = WebhookDelivery.model_validate(await store.requeue(delivery_id))
        await client.start_workflow(
            REDELIVERY_WORKFLOW_NAME,
            again,
            id=redelivery_id(delivery_id, found["attempts"]),
            task_queue=self.scope.config.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return pending
