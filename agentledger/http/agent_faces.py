"""What the agent protocols' faces (A2A, MCP) share: the agents a caller's tenant may run,
and a run of one of them on a task, started the way every start goes
(`client.runs.start`, agentledger.client.starts: the tenant's policy read there).

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
from agentledger.core.results import PendingApproval
from agentledger.core.run_reports import Started
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.profiles import Agent

# The profile fields a caller may set on a run of an agent: each narrows or describes the
# run, none widens what the operator's profile allows.
OPTIONAL_FIELDS = ("priority",)


def approval_data(pending: PendingApproval) -> JsonDict:
    """What an approval asks, as every face tells it: the call, its risk, who decides, the
    hash a decision binds to, and until when."""
    return {
        "approval_id": pending.approval_id,
        "tool": pending.tool,
        "arguments": pending.arguments,
        "risk": pending.risk,
        "required_role": pending.required_role,
        "action_hash": pending.action_hash,
        "expires_at": pending.expires_at.isoformat(),
    }


def agents_for(client: RunClient) -> dict[str, Agent]:
    """The agents the client's tenant may run, by name, in the profiles' order."""
    return profiles.load_agents(client.config.agents or DEMO_AGENTS)


def agent_named(client: RunClient, name: str) -> Agent:
    """The agent, if the tenant may run it; NotFound (404) otherwise, saying which it may."""
    agents = agents_for(client)
    if name not in agents:
        known = ", ".join(sorted(agents)) or "none"
        raise NotFound(f"no agent {name!r} here (this tenant may run: {known})")
    return agents[name]


async def start_agent(
    client: RunClient,
    agent: Agent,
    task: str,
    who: Caller,
    *,
    key: str,
    fields: dict[str, Any] | None = None,
) -> Started:
    """A run of `agent` on `task` for the caller's tenant, named by idempotency key `key`
    (the same key: the same run), with the caller's identity as its requester and the
    caller's `fields` (of `OPTIONAL_FIELDS` alone)."""
    fields = fields or {}
    unknown = sorted(set(fields) - set(OPTIONAL_FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}; this takes task, priority")
    raw = agent.spec_fields(agents_for(client))
    raw.update(fields)
    raw.update(task=task, user=who.identity.name, idempotency_key=key)
    try:
        spec = RunSpec.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the run"
        raise InvalidRequest(f"the run of {agent.name}: {field}: {first['msg']}") from err
    return await client.runs.start(spec=spec, require_tools=True)
