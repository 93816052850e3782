"""What the server enforces itself for tenants: each one's fairness weight on a run queue and
its side queues, and their model-call rates on the model queue. Postgres holds the limits;
these are pushed from there on every change (`tenants set`) and by each worker at start, so
a new cluster learns them too."""

from __future__ import annotations

import asyncio
import random

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import RateLimit
from temporalio.api.workflowservice.v1 import UpdateTaskQueueConfigRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core import fairness
from agentledger.core.admission_models import TenantLimits

RateUpdate = UpdateTaskQueueConfigRequest.RateLimitUpdate
# The server throttles calls per namespace and per service (about forty at once, then a
# budget that refills each second); one push makes four calls, and every worker pushes at
# start, so pushes made together meet the throttle. It is a "not yet", not a "no": wait a
# jittered, growing while (so the refused do not all come back at once) and send again,
# within a bound a command can keep.
THROTTLED_BOUND = 20.0
# A loaded server may also cancel such a call; the change is idempotent, so it is sent again.
TRANSIENT = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.CANCELLED)


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
    request = UpdateTaskQueueConfigRequest(
        namespace=client.namespace,
        identity=client.identity,
        task_queue=task_queue,
        task_queue_type=kind,
        set_fairness_weight_overrides=weights,
        update_fairness_key_rate_limit_default=rate,
    )
    loop = asyncio.get_running_loop()
    give_up, ceiling = loop.time() + THROTTLED_BOUND, 0.25
    while True:
        try:
            await client.workflow_service.update_task_queue_config(request)
            return
        except RPCError as err:
            if err.status not in TRANSIENT or loop.time() >= give_up:
                raise
        await asyncio.sleep(random.uniform(0, ceiling))
        ceiling = min(ceiling * 2, 2.0)
