"""Every client class of one RunClient acts on one `Scope`: the caller (its tenant) and the
bound an operation waits for an answer are resolved once, for every class, and a tenant's
view keeps both (no operation threads them)."""

from __future__ import annotations

import pytest

import agentledger
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEFAULT_WAIT_SECONDS


def services(client: agentledger.RunClient) -> list[object]:
    return [
        client.runs,
        client.sessions,
        client.backlogs,
        client.tenants,
        client.approvers,
        client.deploys,
        client.mirror,
        client.evals,
        client.keys,
    ]


def test_every_service_acts_on_the_clients_one_scope():
    client = agentledger.RunClient.lazy(AgentLedgerConfig.read({}), wait=3)
    scopes = {id(getattr(service, "scope")) for service in services(client)}  # noqa: B009
    assert scopes == {id(client.scope)}
    assert client.scope.tenant is None and client.scope.operator
    assert client.scope.bound(None) == 3, "an operation waits the client's bound"
    assert client.scope.bound(0.5) == 0.5, "unless it names its own"
    assert (
        agentledger.RunClient.lazy(AgentLedgerConfig.read({})).scope.bound(None)
        == DEFAULT_WAIT_SECONDS
    )


def test_a_tenants_view_keeps_the_bound_and_cannot_widen():
    operator = agentledger.RunClient.lazy(AgentLedgerConfig.read({}), wait=2)
    view = operator.acting_for("acme")
    assert view.scope.tenant == "acme" and view.scope.bound(None) == 2
    assert view.scope.acting_in(None) == "acme" and view.scope.acting_in("acme") == "acme"
    with pytest.raises(agentledger.Refused):
        view.scope.acting_in("globex")
    with pytest.raises(agentledger.Refused):
        view.acting_for("globex")


async def test_an_operators_act_is_refused_under_a_tenant_before_connecting():
    """Nothing is connected (no Temporal, no database named): the refusal comes first."""
    view = agentledger.RunClient.lazy(AgentLedgerConfig.read({})).acting_for("acme")
    for act in (
        view.keys.listed,
        lambda: view.tenants.set("acme", {"weight": 2.0}),
        view.deploys.check,
        view.migrate,
    ):
        with pytest.raises(agentledger.Refused, match="an operator's act"):
            await act()
