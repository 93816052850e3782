"""Temporal search attributes on every run, so the Web UI and `temporal workflow list` can
filter runs by agent, tenant and status (e.g. `AgentrunStatus="waiting_for_approval"`).

A run upserts its status only if it was started with these attributes, which keeps runs
started without them (older runs, clusters without them registered) deterministic.
"""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

AGENT = SearchAttributeKey.for_keyword("AgentrunAgent")
TENANT = SearchAttributeKey.for_keyword("AgentrunTenant")
STATUS = SearchAttributeKey.for_keyword("AgentrunStatus")
ALL = (AGENT, TENANT, STATUS)


def for_run(agent: str, tenant: str, status: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(AGENT, agent),
            SearchAttributePair(TENANT, tenant),
            SearchAttributePair(STATUS, status),
        ]
    )


def dev_server_flags() -> list[str]:
    """`temporal server start-dev` arguments that register the attributes at start."""
    return [arg for key in ALL for arg in ("--search-attribute", f"{key.name}=Keyword")]


async def register(client: Client) -> None:
    """Register the attributes in the client's namespace; already registered is fine."""
    request = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in ALL},
    )
    try:
        await client.operator_service.add_search_attributes(request)
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
