"""How a run's priority and tenant become Temporal's task-queue priority and fairness.

A run is started with `Priority(priority_key, fairness_key=tenant, fairness_weight)`; the
server hands the same priority to every activity and child the run schedules without its
own, and keeps it across continue-as-new. Fairness needs the server's dynamic config below
(measured on Server 1.32: without it tenants are served FIFO; with more than one partition
the shares are only roughly fair).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import Priority, RetryPolicy

# Temporal's priority keys: 1 runs first; a run without one gets the middle.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 5
DEFAULT_PRIORITY = 3
DEFAULT_WEIGHT = 1.0

# The matching service's settings that make fairness keys count, for every queue.
FAIRNESS_DYNAMIC_CONFIG = {
    "matching.enableFairness": "true",
    "matching.numTaskqueueReadPartitions": "1",
    "matching.numTaskqueueWritePartitions": "1",
}

# A rated tenant's model calls go to a queue of their own so the server's per-fairness-key
# rate limit there limits them and nothing else (other runs' model calls stay on their own
# queue, started eagerly: agentledger.workflows.steering). Every key on that queue is
# limited to MODEL_RATE_CEILING x its weight, so a tenant's weight there is its rate over
# the ceiling; tenants without a rate keep their weight and, in practice, no limit.
MODEL_QUEUE_SUFFIX = "-model"
MIRROR_QUEUE_SUFFIX = "-mirror"
MODEL_RATE_CEILING = 1000.0


# Bookkeeping writes (the mirror, the admission queue's rows) go ahead of model and tool
# calls waiting on the same queue, so under load what SQL shows keeps up.
MIRROR_PRIORITY = Priority(priority_key=HIGHEST_PRIORITY)
MIRROR_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5), maximum_interval=timedelta(seconds=2)
)


def dev_server_flags(enabled: bool = True) -> list[str]:
    """`temporal server start-dev` arguments that turn fairness on (nothing when off)."""
    if not enabled:
        return []
    return [
        arg
        for key, value in FAIRNESS_DYNAMIC_CONFIG.items()
        for arg in ("--dynamic-config-value", f"{key}={value}")
    ]


def run_priority(priority_key: int, tenant: str, weight: float | None = None) -> Priority:
    """The priority a run is started with; its activities and children inherit it."""
    return Priority(priority_key=priority_key, fairness_key=tenant, fairness_weight=weight)


def model_task_queue(task_queue: str) -> str:
    return task_queue + MODEL_QUEUE_SUFFIX


def run_queue(task_queue: str) -> str:
    """The run queue a side queue (model calls', mirror writes') serves (the queue itself
    for any other)."""
    return task_queue.removesuffix(MODEL_QUEUE_SUFFIX).removesuffix(MIRROR_QUEUE_SUFFIX)


def mirror_task_queue(task_queue: str) -> str:
    """Mirror writes' own queue: at their priority 1 on the run queue they would go ahead of
    every tenant's steps, which undoes fairness under one tenant's burst."""
    return task_queue + MIRROR_QUEUE_SUFFIX


def model_queue_weight(weight: float, model_calls_per_second: float | None) -> float:
    """A tenant's weight on the model queue: its rate over the ceiling, if it has one."""
    if model_calls_per_second is None:
        return weight
    return model_calls_per_second / MODEL_RATE_CEILING
