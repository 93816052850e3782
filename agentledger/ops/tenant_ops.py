"""What operators do with tenants: set a tenant's weight and limits, list them.

Postgres holds the limits, so every starter reads the same ones; the server holds what it
enforces itself (each tenant's weight, and the model-call rates on the model queue), pushed
here on every change and by each worker at start, so a new cluster learns them too.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import RateLimit
from temporalio.api.workflowservice.v1 import UpdateTaskQueueConfigRequest
from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.core import bounds, fairness
from agentledger.core.admission_models import TenantLimits
from agentledger.core.errors import TenantError
from agentledger.ops import admission_ops
from agentledger.store.tenant_store import TenantStore

RateUpdate = UpdateTaskQueueConfigRequest.RateLimitUpdate


async def set_tenant(
    client: Client,
    pool: AsyncConnectionPool,
    tenant: str,
    changes: dict[str, Any],
    *,
    task_queue: str,
) -> TenantLimits:
    """Change some of a tenant's settings, keep the rest; takes effect for new starts at once,
    and for runs already queued too (a raised cap admits waiting runs)."""
    bounds.check_text("tenant", tenant)
    store = TenantStore(pool)
    current = await store.limits(tenant)
    try:
        limits = TenantLimits.model_validate({**current.model_dump(), **changes})
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise TenantError(f"invalid tenant settings: {problems}") from err
    await store.save(limits)
    rated = any(t.model_calls_per_second is not None for t in await store.all_limits())
    try:
        # Overrides for keys left out stay as they are: this tenant's are enough.
        await apply_queue_config(client, task_queue, [limits], rated=rated)
    except RPCError as err:
        raise TenantError(
            f"saved {tenant}'s settings, but the server refused them ({err.message}); "
            "every worker pushes them again when it starts"
        ) from err
    await admission_ops.configure(client, limits)
    return limits


async def apply_queue_config(
    client: Client, task_queue: str, tenants: list[TenantLimits], *, rated: bool
) -> None:
    """Tell the server these tenants' weights on the run and mirror queues, and their weights
    and model-call rates on the model queue (rate = MODEL_RATE_CEILING x weight there);
    `rated`: some tenant has a rate, so the model queue's per-tenant limit is on."""
    if not tenants:
        return
    weights = {t.tenant: t.weight for t in tenants}
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        await _update(client, task_queue, kind, weights=weights)
    mirror = fairness.mirror_task_queue(task_queue)
    await _update(client, mirror, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, weights=weights)
    await _update(
        client,
        fairness.model_task_queue(task_queue),
        TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        weights={
            t.tenant: fairness.model_queue_weight(t.weight, t.model_calls_per_second)
            for t in tenants
        },
        rate=RateUpdate(
            rate_limit=RateLimit(requests_per_second=fairness.MODEL_RATE_CEILING),
            reason="agentledger: per-tenant model-call rates",
        )
        if rated
        else RateUpdate(reason="agentledger: no tenant has a model-call rate"),
    )


async def _update(
    client: Client,
    task_queue: str,
    kind: TaskQueueType.ValueType,
    *,
    weights: dict[str, float],
    rate: UpdateTaskQueueConfigRequest.RateLimitUpdate | None = None,
) -> None:
    await client.workflow_service.update_task_queue_config(
        UpdateTaskQueueConfigRequest(
            namespace=client.namespace,
            identity=client.identity,
            task_queue=task_queue,
            task_queue_type=kind,
            set_fairness_weight_overrides=weights,
            update_fairness_key_rate_limit_default=rate,
        )
    )


async def list_tenants(pool: AsyncConnectionPool) -> list[dict[str, Any]]:
    return await TenantStore(pool).overview()
