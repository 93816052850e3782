"""Standing approvals through the HTTP door and the CLI, without a worker: granted only
within the tenant's policy (a tool it lets approvers grant, never one it always asks about,
no longer than it allows, by an approver), listed and revoked within the tenant, another
tenant's rule reading exactly as a missing one. tests/test_inbox.py drives the story in a
browser: a rule approving a call, its receipt naming it, revoked, asking again."""

from __future__ import annotations

from pathlib import Path

import httpx
from psycopg_pool import AsyncConnectionPool

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from tests.http_support import bearer, make_key, served, tenant_name
from tests.test_cli import run_cli

RULES = "/v1/standing-approvals"


async def test_standing_approvals_stay_within_the_policy_and_the_tenant(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    ours, theirs = tenant_name(), tenant_name()
    async with RunClient.lazy(settings) as operator:
        await operator.tenants.set_policy(
            ours,
            {
                "standing_tools": ["refund_order", "send_message"],
                "standing_max_hours": 2,
                "always_ask": ["send_message"],
            },
        )
    maria = await make_key(settings, ours, "approver", name="maria (refunds)")
    runner = await make_key(settings, ours, "runner")
    other = await make_key(settings, theirs, "admin")
    async with served(settings, tmp_path) as door, httpx.AsyncClient(base_url=door.url) as http:

        async def grant(key: str, **body: object) -> httpx.Response:
            return await http.post(RULES, json=body, headers=bearer(key))

        made = await grant(maria, tool="refund_order", when="cents <= 2000", hours=1)
        assert made.status_code == 201, made.text
        rule = made.json()
        assert rule["granted_by"]["name"] == "maria (refunds)" and rule["tenant"] == ours
        refused = {
            "always asks": await grant(maria, tool="send_message", hours=1),
            "not grantable": await grant(maria, tool="create_ticket", hours=1),
            "too long": await grant(maria, tool="refund_order", hours=3),
            "a runner": await grant(runner, tool="refund_order", hours=1),
            "another tenant's policy": await grant(other, tool="refund_order", hours=1),
        }
        assert {why: r.status_code for why, r in refused.items()} == dict.fromkeys(refused, 403)
        assert "always asks a person about send_message" in refused["always asks"].text
        assert "--standing-tools create_ticket" in refused["not grantable"].text
        unreadable = await grant(maria, tool="refund_order", when="cents >> 1", hours=1)
        assert unreadable.status_code == 400, unreadable.text
        elsewhere = await grant(maria, tool="refund_order", hours=1, run_id="run-nowhere")
        assert elsewhere.status_code == 404, elsewhere.text

        listed = await http.get(RULES, headers=bearer(runner))
        assert [r["rule_id"] for r in listed.json()] == [rule["rule_id"]]
        assert (await http.get(RULES, headers=bearer(other))).json() == []
        # Another tenant's rule reads exactly as one that does not exist.
        missing = "sa-" + "0" * 16
        crossed = await http.post(f"{RULES}/{rule['rule_id']}/revoke", headers=bearer(other))
        absent = await http.post(f"{RULES}/{missing}/revoke", headers=bearer(other))
        assert crossed.status_code == absent.status_code == 404
        assert crossed.text.replace(rule["rule_id"], missing) == absent.text

        revoked = await http.post(f"{RULES}/{rule['rule_id']}/revoke", headers=bearer(maria))
        assert (
            revoked.status_code == 200 and revoked.json()["revoked_by"]["name"] == "maria (refunds)"
        )
        assert (await http.get(RULES, headers=bearer(maria))).json() == []
        kept = await http.get(RULES, params={"all": "true"}, headers=bearer(maria))
        assert [r["revoked_at"] is not None for r in kept.json()] == [True]


async def test_the_standing_commands(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """`tenants set --standing-tools`, then `standing grant`, `list`, `revoke` as the operator."""
    tenant, home = tenant_name(), tmp_path / "home"
    policy = await run_cli(
        settings, home, "tenants", "set", tenant, "--standing-tools", "refund_order",
        "--standing-max-hours", "8", "--always-ask", "send_message",
    )  # fmt: skip
    assert policy.code == 0, policy.err
    assert "standing approvals: refund_order, at most 8h" in policy.out, policy.out
    assert "always ask: send_message" in policy.out
    made = await run_cli(
        settings, home, "standing", "grant", "refund_order", "--when", "cents <= 2000",
        "--hours", "1", "--tenant", tenant, "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    rule_id = made.json()["rule_id"]
    listed = await run_cli(settings, home, "standing", "list", "--tenant", tenant)
    assert rule_id in listed.out and "refund_order when cents <= 2000" in listed.out
    refused = await run_cli(
        settings, home, "standing", "grant", "send_message", "--hours", "1", "--tenant", tenant
    )
    assert refused.code == 5 and "always asks" in refused.err, refused.err
    gone = await run_cli(settings, home, "standing", "revoke", rule_id, "--tenant", tenant)
    assert gone.code == 0 and "ask a person again" in gone.out, gone.out
    missing = await run_cli(settings, home, "standing", "revoke", rule_id, "--tenant", "other")
    assert missing.code == 3, missing.err
