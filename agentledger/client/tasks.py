"""`client.tasks`: a run as an agent protocol's task (A2A, MCP): the context it was started
in, its stored artifacts, and push subscriptions that tell a receiver, signed, each change
of its state until it ends (agentledger.workflows.task_notifier delivers them).

Every method acts on a run of the caller's tenant alone: another tenant's reads as missing.
"""

from __future__ import annotations

from temporalio.common import WorkflowIDConflictPolicy

from agentledger.client.scope import Scope
from agentledger.core.constants import TASK_NOTIFIER_WORKFLOW_NAME
from agentledger.core.errors import InvalidRequest
from agentledger.core.keys import id_part
from agentledger.core.results import WatchItem
from agentledger.core.webhook_models import (
    NotifierInput,
    PushSubscription,
    StoredArtifact,
    WebhookDelivery,
    notifier_id,
)
from agentledger.store import artifacts
from agentledger.store.webhook_store import WebhookStore

# A push subscription's secret signs its deliveries: short ones are guessable.
MIN_SECRET_CHARS = 16
SCHEMES = ("http://", "https://")


class Tasks:
    """The caller's runs as protocol tasks: another tenant's reads as missing."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def _tenant_of(self, run_id: str) -> str:
        return await self.scope.tenant_of_run(run_id)

    async def _store(self) -> WebhookStore:
        return WebhookStore(await self.scope.database())

    # ------------------------------------------------------------ contexts

    async def remember_context(self, run_id: str, context_id: str, agent: str) -> str:
        """Record the context the task was started in; the one recorded first stays."""
        tenant = await self._tenant_of(run_id)
        return await (await self._store()).remember_task(run_id, tenant, context_id, agent)

    async def context_runs(self, context_id: str, agent: str) -> list[str]:
        """The agent's runs started in the context, of the caller's tenant, oldest first."""
        return await (await self._store()).context_tasks(self.scope.home_tenant, context_id, agent)

    async def context_of(self, run_id: str) -> str | None:
        tenant = await self._tenant_of(run_id)
        return await (await self._store()).task_context(run_id, tenant)

    # ------------------------------------------------------------ what it did

    async def events(self, run_id: str) -> list[WatchItem]:
        """The run's events so far, in order, as the mirror holds them (no waiting)."""
        await self._tenant_of(run_id)
        rows = await (await self._store()).events_after(run_id, 0)
        return [WatchItem(kind="event", **row) for row in rows]

    # ------------------------------------------------------------ artifacts

    async def artifacts(self, run_id: str) -> list[StoredArtifact]:
        """The artifacts the run stored (large outputs), each with its content."""
        await self._tenant_of(run_id)
        pool = await self.scope.database()
        async with pool.connection() as conn:
            listed = await artifacts.run_artifacts(conn, run_id)
            for each in listed:
                found = await artifacts.run_artifact(conn, run_id, each["artifact_id"])
                each["content"] = found[1] if found else b""
        return [StoredArtifact.model_validate(each) for each in listed]

    # ------------------------------------------------------------ push subscriptions

    async def subscribe(
        self,
        run_id: str,
        name: str,
        *,
        url: str,
        secret: str,
        context_id: str,
        auth_scheme: str | None = None,
        auth_credentials: str | None = None,
    ) -> PushSubscription:
        """Tell `url` each change of the run's state, signed with `secret` (HMAC-SHA256,
        agentledger.core.webhook_signatures), until the run ends; the same name again
        replaces the subscription's settings."""
        if not url.startswith(SCHEMES):
            raise InvalidRequest(f"a push URL takes http:// or https://, not {url[:80]!r}")
        if len(secret) < MIN_SECRET_CHARS:
            raise InvalidRequest(
                f"the push config's token signs each notification: give one of at least "
                f"{MIN_SECRET_CHARS} characters (a random one)"
            )
        tenant = await self._tenant_of(run_id)
        subscription_id = f"{run_id}.{id_part(name)}"
        row = await (await self._store()).subscribe(
            subscription_id=subscription_id,
            tenant=tenant,
            run_id=run_id,
            name=name,
            url=url,
            secret=secret,
            auth_scheme=auth_scheme,
            auth_credentials=auth_credentials,
        )
        client = await self.scope.temporal()
        await client.start_workflow(
            TASK_NOTIFIER_WORKFLOW_NAME,
            NotifierInput(
                subscription_id=subscription_id,
                tenant=tenant,
                run_id=run_id,
                context_id=context_id,
            ),
            id=notifier_id(subscription_id),
            task_queue=self.scope.config.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return PushSubscription.model_validate(row)

    async def subscriptions(self, run_id: str) -> list[PushSubscription]:
        tenant = await self._tenant_of(run_id)
        rows = await (await self._store()).subscriptions(tenant, run_id)
        return [PushSubscription.model_validate(row) for row in rows]

    async def unsubscribe(self, run_id: str, name: str) -> bool:
        """Stop telling this subscriber; False if it was not subscribed."""
        tenant = await self._tenant_of(run_id)
        return await (await self._store()).unsubscribe(tenant, f"{run_id}.{id_part(name)}")

    async def deliveries(self, run_id: str, name: str) -> list[WebhookDelivery]:
        """Each delivery to this subscriber: status, attempts, what the receiver answered."""
        await self._tenant_of(run_id)
        rows = await (await self._store()).deliveries(f"{run_id}.{id_part(name)}")
        return [WebhookDelivery.model_validate(row) for row in rows]
