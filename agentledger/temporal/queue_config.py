"""What the server enforces itself for tenants: each one's fairness weight on a run queue and
its side queues, and their model-call rates on the model queue. Postgres holds the limits;
these are pushed from there on every change (`tenants set`) and by each worker at start, so
a new cluster learns them too."""

from __future__ import annotations

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import RateLimit
from temporalio.api.workflowservice.v1 import UpdateTaskQueueConfigRequest
from temporalio.client import Client

from agentledger.core import fairness
from agentledger.core.admission_models import TenantLimits

RateUpdate = UpdateTaskQueueConfigRequest.RateLimitUpdate


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
