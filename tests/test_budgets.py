"""Budgets above a run (issue 50): a tenant's spend per day and month, advisory or enforcing.

On the real stack (dev server, Postgres, the offline model over HTTP): a tenant with an
enforcing daily budget of N tokens runs several runs at once and a parent whose sub-agent
works meanwhile; together they never pass N by more than one model call's tokens, a run near
the limit wraps up with an answer, one that reaches it ends `budget_exhausted` with a receipt
of what it did, and the next start is refused with the time the budget resets (the CLI's
exit 5). `agentledger costs --by tenant,agent` equals the sum of the receipts. An advisory
budget only warns: its alerts are raised once each and delivered, signed, to the tenant's
webhook.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger import RunClient
from agentledger.core import budgets
from agentledger.core.budgets import BudgetLimit, Spend
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import BudgetExceeded
from agentledger.core.webhook_signatures import verify
from agentledger.profiles import Agent
from agentledger.store.webhook_store import WebhookStore
from tests.support import closed, eventually, make_spec, rows
from tests.test_cli import run_cli
from tests.webhook_support import Receiver

LOOK_UP = "Look up our refund policy."
HELPER = Agent(name="helper", instructions="You look things up.", tools=["search_notes"])
LEAD = Agent(name="lead", instructions="You lead.", tools=[], subagents=["helper"])
AGENTS = {"helper": HELPER, "lead": LEAD}
DELEGATE = f"call agent__helper {json.dumps({'task': LOOK_UP})}"


def test_a_call_goes_waits_wraps_up_or_is_refused_by_what_is_left():
    limit = BudgetLimit(tenant="t", period="day", tokens=1000, mode="enforcing")
    first = budgets.asking(Spend(), prompt_tokens=100)
    assert first.tokens == 100 and first.usd == 0
    assert budgets.verdict(limit, Spend(), first) == "go"  # the first call, alone
    # A call's size is its prompt and the period's longest reply, or its largest call.
    spent = Spend(tokens=300, usd=0.03, largest_tokens=150, largest_out=40)
    assert budgets.asking(spent, 60).tokens == 150
    assert budgets.asking(spent, 200).tokens == 240
    assert budgets.asking(spent, 200).usd == pytest.approx(0.024)
    ask = budgets.Ask(tokens=100)
    assert budgets.verdict(limit, Spend(in_flight=1), budgets.Ask()) == "wait"  # size unknown
    assert budgets.verdict(limit, Spend(tokens=100, in_flight=2, held_tokens=200), ask) == "go"
    # The calls in flight may take 300 of the 350 left, and this one 100 more: it waits.
    busy = Spend(tokens=650, in_flight=3, held_tokens=300)
    assert budgets.verdict(limit, busy, ask) == "wait"
    assert budgets.verdict(limit, Spend(tokens=850), ask) == "wrap_up"  # room for this one
    assert budgets.verdict(limit, Spend(tokens=1000), ask) == "exhausted"
    assert budgets.verdict(limit, Spend(tokens=999)) == "go"  # a start: spent or not
    usd = BudgetLimit(tenant="t", period="month", usd=2.0, tokens=10**9, mode="enforcing")
    assert budgets.verdict(usd, Spend(usd=2.0, tokens=5), ask) == "exhausted"  # whichever first
    with pytest.raises(ValueError, match="limits USD, tokens or both"):
        BudgetLimit(tenant="t", period="day")


def test_periods_reset_at_the_next_utc_day_and_month():
    at = datetime(2025, 12, 31, 23, 59, tzinfo=UTC)
    assert budgets.period_bounds("day", at) == (
        datetime(2025, 12, 31, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert budgets.period_bounds("month", at) == (
        datetime(2025, 12, 1, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
    )


async def journal_of(pool: AsyncConnectionPool, tenant: str) -> list[dict]:
    return await rows(
        pool,
        "SELECT run_id, agent, charged_to, tokens_in + tokens_out AS tokens, cost_usd::float8 "
        "AS cost FROM model_journal WHERE tenant = %s",
        tenant,
    )


async def all_closed(client: Client, run_ids: list[str]) -> bool:
    return all([await closed(client.get_workflow_handle(r)) for r in run_ids])


async def test_an_enforcing_token_budget_holds_concurrent_runs_and_a_subagent(
    client: Client, settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker, tmp_path: Path
):
    tenant = f"spend-{uuid.uuid4().hex[:8]}"
    limit = 900
    async with RunClient(client, settings) as operator, worker():
        set_to = await operator.tenants.set_budget(
            tenant, "day", {"tokens": limit, "mode": "enforcing"}
        )
        assert set_to is not None and set_to.mode == "enforcing"
        ours = operator.acting_for(tenant)
        # The parent first, so that its sub-agent works while the others start.
        lead = await ours.runs.start(spec=LEAD.spec(DELEGATE, agents=AGENTS, **fast()))

        async def child_started() -> bool:
            return bool((await ours.runs.status(lead.run_id)).children)

        await eventually(child_started, what="the sub-agent's run")
        others = await asyncio.gather(
            *(ours.runs.start(spec=make_spec(LOOK_UP, agent="looker")) for _ in range(4))
        )
        run_ids = [lead.run_id, *(s.run_id for s in others)]
        await eventually(lambda: all_closed(client, run_ids), seconds=90, what="every run")
        receipts = {r: await ours.runs.receipt(r) for r in run_ids}
        children = (await ours.runs.status(lead.run_id)).children
        receipts.update({c: await ours.runs.receipt(c) for c in children})

        # Together they passed the budget by at most one model call.
        journal = await journal_of(pool, tenant)
        spent = sum(row["tokens"] for row in journal)
        assert spent <= limit + max(row["tokens"] for row in journal), journal
        assert {r["run_id"] for r in journal} >= set(children)  # the sub-agent's count too
        assert {r["charged_to"] for r in journal} == {f"tenant:{tenant}"}
        outcomes = {r: receipt.outcome.value for r, receipt in receipts.items()}
        assert set(outcomes.values()) <= {"completed", "budget_exhausted"}, outcomes
        assert "budget_exhausted" in outcomes.values(), outcomes
        # A run near the limit was told to wrap up, and answered.
        wrapped = [
            r
            for r in receipts
            if await rows(
                pool, "SELECT 1 FROM events WHERE run_id = %s AND type = 'budget.wrap_up'", r
            )
        ]
        assert wrapped, outcomes
        assert any(
            receipts[r].outcome.value == "completed" and "## Summary" in (receipts[r].answer or "")
            for r in wrapped
        ), {r: receipts[r].answer for r in wrapped}
        # One that reached it ended with a receipt of what it did, never mid-call.
        ended = next(r for r, o in outcomes.items() if o == "budget_exhausted")
        assert "budget" in (receipts[ended].error or "")

        # The next start is refused, saying when the budget resets.
        tomorrow = budgets.period_bounds("day", datetime.now(UTC))[1]
        with pytest.raises(BudgetExceeded) as refused:
            await ours.runs.start(spec=make_spec(LOOK_UP))
        assert refused.value.reset_at == tomorrow
        assert tomorrow.isoformat(timespec="seconds") in str(refused.value)
        home = tmp_path / "home"
        result = await run_cli(settings, home, "start", "--task", LOOK_UP, "--tenant", tenant)
        assert result.code == 5, (result.code, result.err)
        assert "resets at" in result.err

        # What `costs` says equals what the receipts say, per tenant and agent: each run's
        # own calls (a parent's receipt counts its sub-agent's too) and what it did not use.
        own: dict[tuple[str, str], int] = {}
        for receipt in receipts.values():
            tokens = receipt.tokens_in + receipt.tokens_out + receipt.unaccepted_tokens
            for child in receipt.children:
                tokens -= receipts[child].tokens_in + receipts[child].tokens_out
            key = (receipt.tenant, receipt.agent)
            own[key] = own.get(key, 0) + tokens
        result = await run_cli(
            settings, home, "costs", "--by", "tenant,agent", "--json", "--tenant", tenant
        )
        assert result.code == 0, result.err
        said = {(r["tenant"], r["agent"]): r["tokens_in"] + r["tokens_out"] for r in result.json()}
        assert said == own


def fast() -> dict:
    return {"timeouts": {"heartbeat_seconds": 5, "initial_retry_seconds": 0.2}}


async def test_an_advisory_budget_only_warns_and_its_alerts_reach_the_tenants_webhook(
    client: Client, settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker
):
    tenant = f"warned-{uuid.uuid4().hex[:8]}"
    with Receiver() as receiver:
        await WebhookStore(pool).subscribe(
            subscription_id=f"{tenant}.alerts",
            tenant=tenant,
            run_id=None,
            name="alerts",
            url=receiver.url,
            secret="s3cret",
        )
        async with RunClient(client, settings) as operator, worker():
            await operator.tenants.set_budget(tenant, "day", {"tokens": 50})
            ours = operator.acting_for(tenant)
            for _ in range(2):  # past the budget, twice: each alert is raised once
                started = await ours.runs.start(spec=make_spec(LOOK_UP))
                result = await asyncio.wait_for(ours.runs.result(started.run_id), 60)
                assert result.status.value == "completed"
            shown = await ours.tenants.budgets()
            assert shown[0].share >= 1 and shown[0].mode == "advisory"

            def alerts() -> list:
                """The budget's deliveries (the tenant's webhook hears of its runs' ends too)."""
                return [
                    d
                    for d in receiver.accepted()
                    if json.loads(d.body).get("event", "").startswith("budget.")
                ]

            async def both() -> bool:
                return len(alerts()) >= 2

            await eventually(both, what="the budget's two alerts")
            await asyncio.sleep(0.5)  # none more come
            deliveries = alerts()
            assert len(deliveries) == 2, deliveries
        events = set()
        for delivery in deliveries:
            verify(
                "s3cret", delivery.body, delivery.headers["agentledger-signature"], now=time.time()
            )
            body = json.loads(delivery.body)
            assert body["tenant"] == tenant and body["mode"] == "advisory"
            events.add(body["event"])
        assert events == {"budget.warning", "budget.exceeded"}
        raised = await rows(pool, "SELECT kind FROM budget_alerts WHERE tenant = %s", tenant)
        assert sorted(r["kind"] for r in raised) == ["exceeded", "warning"]


async def test_a_credentials_budget_refuses_its_starts_alone(
    client: Client, settings: AgentLedgerConfig, pool: AsyncConnectionPool
):
    tenant = f"keyed-{uuid.uuid4().hex[:8]}"
    async with RunClient(client, settings) as operator:
        await operator.tenants.set_budget(
            tenant, "month", {"usd": 0.5, "mode": "enforcing"}, subject="key:0123456789abcdef"
        )
        async with pool.connection() as conn:  # that key spent it already this month
            await conn.execute(
                "INSERT INTO model_journal (run_id, step_id, attempt, model, response, tokens_in,"
                " tokens_out, cost_usd, tenant, charged_to) VALUES (%s, 's', 1, 'm', '{}', 1, 1,"
                " 0.75, %s, 'key:0123456789abcdef')",
                (f"run-{tenant}", tenant),
            )
        refusal = await operator.scope.mirror()
        assert refusal is not None
        from agentledger.client.starts import within_budget

        with pytest.raises(BudgetExceeded, match="key:0123456789abcdef"):
            await within_budget(refusal, tenant, "key:0123456789abcdef")
        await within_budget(refusal, tenant, "key:fedcba9876543210")  # another key starts
        assert (await operator.tenants.budgets(tenant))[0].resets_at == (
            budgets.period_bounds("month", datetime.now(UTC))[1]
        )
        assert (
            datetime.now(UTC) + timedelta(days=32)
            > (await operator.tenants.budgets(tenant))[0].resets_at
        )
