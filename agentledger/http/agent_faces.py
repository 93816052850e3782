"""What the agent protocols' faces (A2A, MCP) share: the agents a caller's tenant may run,
and a run of one of them on a task, started the way every start goes
(`client.runs.start`, agentledger/client/starts.py: the tenant's policy read there).

The requester is the credential's identity; a protocol's own fields never name a tenant or
a role.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentledger import profiles
from agentledger.client.run_client import RunClient
from agentledger.core.access import Caller
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import InvalidRequest, NotFound
from agentledger.core.run_reports import Started
from agentledger.core.spec import RunSpec
from agentledger.profiles import Agent

# The profile fields a caller may set on a run of an agent: each narrows or describes the
# run, none widens what the operator's profile allows.
OPTIONAL_FIELDS = ("priority",)


def agents_for(client: RunClient) -> dict[str, Agent]:
    """The agents the client's tenant may run, by name, in the profiles' order."""
    return profiles.load_agents(client.settings.agents or DEMO_AGENTS)


def agent_named(client: RunClient, name: str) -> Agent:
    """The agent, if the tenant may run it; NotFound (404) otherwise, saying which it may."""
    agents = agents_for(client)
    if name not in agents:
        known = ", ".join(sorted(agents)) or "none"
        raise NotFound(f"no agent {name!r} here (this tenant may run: {known})")
    return agents[name]


async def start_agent(
    client: RunClient, agent: Agent, task: str, who: Caller, *, key: str, **fields: Any
) -> Started:
    """A run of `agent` on `task` for the caller's tenant, named by idempotency key `key`
    (the same key: the same run), with the caller's identity as its requester."""
    unknown = sorted(set(fields) - set(OPTIONAL_FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}; this takes task, priority")
    raw = agent.spec_fields(agents_for(client))
    raw.update(fields)
    raw.update(task=task, tenant=who.tenant, user=who.identity, idempotency_key=key)
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as err:
        raise InvalidRequest(f"the run of {agent.name}: {err.errors()[0]['msg']}") from err
    return await client.runs.start(spec=spec, require_tools=True)
