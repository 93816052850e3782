"""Temporal search attributes on every run, so the Web UI and `temporal workflow list` can
filter runs by agent, tenant, status and priority (e.g. `AgentrunStatus="waiting_for_approval"`,
`AgentrunPriority<=2`).

A run upserts its status only if it was started with these attributes, which keeps runs
started without them (older runs, clusters without them registered) deterministic.
`AgentrunStatus` holds what a person filters on (`shown_status`): queued, running,
waiting_for_approval, paused, completed, failed or cancelled. The step-by-step status
(planning, waiting_for_tool, verifying) is in `agentledger status` and the mirror; keeping it
in the attribute cost two upserts, each a history event and a visibility write, per step.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core.states import RunStatus

AGENT = SearchAttributeKey.for_keyword("AgentrunAgent")
TENANT = SearchAttributeKey.for_keyword("AgentrunTenant")
STATUS = SearchAttributeKey.for_keyword("AgentrunStatus")
PRIORITY = SearchAttributeKey.for_int("AgentrunPriority")
ALL: tuple[SearchAttributeKey[str] | SearchAttributeKey[int], ...] = (
    AGENT,
    TENANT,
    STATUS,
    PRIORITY,
)
# The statuses a run passes through many times a run, shown as one.
RUNNING = "running"
_WORKING = frozenset({RunStatus.PLANNING, RunStatus.WAITING_FOR_TOOL, RunStatus.VERIFYING})


def shown_status(status: RunStatus) -> str:
    """The value `AgentrunStatus` holds while the run is in `status`."""
    return RUNNING if status in _WORKING else status.value


_CLI_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
}


def for_run(
    agent: str, tenant: str, status: str, priority: int | None = None
) -> TypedSearchAttributes:
    pairs: list[SearchAttributePair[str] | SearchAttributePair[int]] = [
        SearchAttributePair(AGENT, agent),
        SearchAttributePair(TENANT, tenant),
        SearchAttributePair(STATUS, status),
    ]
    if priority is not None:
        pairs.append(SearchAttributePair(PRIORITY, priority))
    return TypedSearchAttributes(pairs)


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` arguments that register the attributes at start."""
    return [
        arg
        for key in ALL
        for arg in ("--search-attribute", f"{key.name}={_CLI_TYPES[key.indexed_value_type]}")
    ]


async def register(client: Client) -> None:
    """Register the attributes in the client's namespace; already registered is fine."""
    request = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={
            key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in ALL
        },
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
