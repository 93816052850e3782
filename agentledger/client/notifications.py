"""`client.notifications`: a tenant's notification webhooks, told, signed, what its runs do
(`approval.requested`, `approval.decided`, `run.finished`, `run.failed`), so a run that
needs a person does not wait until someone happens to look.

A subscription is a tenant-wide row of the webhook store (agentledger.store.webhook_store:
no run), its secret shown once when it is made. Each run started while its tenant has one
gets a notifier workflow (agentledger.workflows.run_notifier) that delivers, retried by
Temporal and recorded; `deliveries` reads what became of each.
"""

from __future__ import annotations

import secrets

from temporalio.common import WorkflowIDConflictPolicy

from agentledger.client.scope import Scope
from agentledger.core import bounds
from agentledger.core.constants import RUN_NOTIFIER_WORKFLOW_NAME
from agentledger.core.errors import InvalidRequest, PolicyDenied, RuleNotFound
from agentledger.core.keys import id_part
from agentledger.core.webhook_models import (
    NewSubscription,
    PushSubscription,
    RunNotifierInput,
    WebhookDelivery,
    run_notifier_id,
)
from agentledger.store.webhook_store import WebhookStore

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
        self, name: str, url: str, *, secret: str | None = None, tenant: str | None = None
    ) -> NewSubscription:
        """Tell `url` what the tenant's runs started from now on do, signed with `secret`
        (a random one if not given); the same name again replaces its settings."""
        named = self._tenant(tenant)
        self._admin()
        bounds.check_text("name", name)
        bounds.check_text("url", url)
        if not url.startswith(SCHEMES):
            raise InvalidRequest(f"a webhook URL takes http:// or https://, not {url[:80]!r}")
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


async def follow_run(scope: Scope, tenant: str, run_id: str) -> None:
    """Start the run's notifier when its tenant has notification webhooks (once per run)."""
    pool = await scope.database()
    if not await WebhookStore(pool).subscriptions(tenant, None):
        return
    client = await scope.temporal()
    await client.start_workflow(
        RUN_NOTIFIER_WORKFLOW_NAME,
        RunNotifierInput(tenant=tenant, run_id=run_id),
        id=run_notifier_id(run_id),
        task_queue=scope.settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
