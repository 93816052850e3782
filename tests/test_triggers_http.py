"""Triggers and spend over HTTP (issue 50), through `agentledger serve` on the real stack.

An admin makes a webhook trigger (its secret answered once); a delivery with a bad
signature, a stale one, or to a hook that is not there is 401 and starts nothing; the same
GitHub delivery sent three times starts one run, whose task the delivery's body filled in,
in the hook's tenant whatever the body says, named by its receipt; a delivery that misses
the template's field is 400. A tenant over an enforcing budget gets 429 with Retry-After,
on a start and on a delivery alike. Schedules, budgets and costs have routes of their own,
each in its role: a runner makes a schedule only where the tenant's policy says so.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.webhook_signatures import sign
from tests.http_support import bearer, make_key, served
from tests.support import eventually, rows

ISSUE = {"action": "opened", "issue": {"title": "Refunds page is down", "number": 7}}


def github(secret: str, body: bytes, delivery: str) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": "issues",
    }


async def hook_runs(pool: AsyncConnectionPool, tenant: str) -> list[dict[str, Any]]:
    return await rows(pool, "SELECT run_id FROM hook_deliveries WHERE tenant = %s", tenant)


async def test_signed_deliveries_start_one_run_each_and_bad_ones_nothing(
    client, settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker, tmp_path: Path
):
    tenant = f"hooked-{uuid.uuid4().hex[:8]}"
    admin = await make_key(settings, tenant, "admin")
    runner = await make_key(settings, tenant, "runner")
    async with (
        worker(),
        served(settings, tmp_path) as door,
        httpx.AsyncClient(base_url=door.url, timeout=30) as http,
    ):
        made = await http.post(
            "/v1/hooks",
            json={"name": "github", "task": "Triage: {body.issue.title}"},
            headers=bearer(admin),
        )
        assert made.status_code == 201, made.text
        secret, path = made.json()["secret"], made.json()["path"]
        assert path == f"/v1/hooks/{tenant}.github"
        refused = await http.post(
            "/v1/hooks", json={"name": "x", "task": "t"}, headers=bearer(runner)
        )
        assert refused.status_code == 403, refused.text
        listed = await http.get("/v1/hooks", headers=bearer(admin))
        assert [h["name"] for h in listed.json()] == ["github"]
        assert "secret" not in listed.text

        body = json.dumps({**ISSUE, "tenant": "someone-else"}).encode()
        # A bad signature, a stale one, none, another hook: 401, nothing starts.
        bad = github("not the secret at all", body, "d-bad")
        stale = {
            "Content-Type": "application/json",
            "AgentLedger-Signature": sign(secret, body, now=time.time() - 3600),
        }
        for target, headers in (
            (path, bad),
            (path, stale),
            (path, {"Content-Type": "application/json"}),
            (f"/v1/hooks/{tenant}.nothere", github(secret, body, "d-1")),
            ("/v1/hooks/no-dot-here", github(secret, body, "d-1")),
        ):
            answered = await http.post(target, content=body, headers=headers)
            assert answered.status_code == 401, (target, answered.text)
            assert answered.json()["error"]["kind"] == "unauthenticated"
        assert await hook_runs(pool, tenant) == []
        # A hook that is not there cannot be told from one whose signature failed.
        real = await http.post(path, content=body, headers=bad)
        unknown = await http.post(f"/v1/hooks/{tenant}.nothere", content=body, headers=bad)
        assert real.content == unknown.content, (real.text, unknown.text)

        # The same delivery three times: one run.
        answers = [
            await http.post(path, content=body, headers=github(secret, body, "d-1"))
            for _ in range(3)
        ]
        assert [a.status_code for a in answers] == [201, 200, 200], [a.text for a in answers]
        assert len({a.json()["run_id"] for a in answers}) == 1
        run_id = answers[0].json()["run_id"]
        assert len(await hook_runs(pool, tenant)) == 1
        # Signed the generic way, a second delivery is a second run.
        generic = {
            "Content-Type": "application/json",
            "AgentLedger-Delivery": "d-2",
            "AgentLedger-Signature": sign(secret, body, now=time.time()),
        }
        second = await http.post(path, content=body, headers=generic)
        assert second.status_code == 201 and second.json()["run_id"] != run_id
        # A body without the template's field starts nothing.
        empty = json.dumps({"action": "opened"}).encode()
        missing = await http.post(path, content=empty, headers=github(secret, empty, "d-3"))
        assert missing.status_code == 400 and "body.issue.title" in missing.text

        async with RunClient(client, settings) as operator:
            ours = operator.acting_for(tenant)
            state = await ours.runs.status(run_id)
            assert state.task == "Triage: Refunds page is down" and state.tenant == tenant

            async def ended() -> Any:
                try:
                    return await ours.runs.receipt(run_id)
                except Exception:
                    return None

            receipt = await eventually(ended, seconds=60, what="the run's receipt")
        assert receipt.trigger is not None and receipt.trigger.kind == "hook"
        assert receipt.trigger.name == "github" and receipt.trigger.delivery_id == "d-1"
        assert receipt.charged_to == "hook:github" and receipt.tenant == tenant

        deleted = await http.post("/v1/hooks/github/delete", headers=bearer(admin))
        assert deleted.status_code == 200, deleted.text
        gone = await http.post(path, content=body, headers=github(secret, body, "d-4"))
        assert gone.status_code == 401


async def test_spent_budgets_answer_429_and_schedules_have_routes_in_their_roles(
    client, settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
):
    tenant = f"routes-{uuid.uuid4().hex[:8]}"
    admin = await make_key(settings, tenant, "admin")
    runner = await make_key(settings, tenant, "runner")
    viewer = await make_key(settings, tenant, "viewer")
    async with (
        served(settings, tmp_path) as door,
        httpx.AsyncClient(base_url=door.url, timeout=30) as http,
    ):
        budget = {"period": "day", "tokens": 5, "mode": "enforcing"}
        assert (
            await http.post("/v1/tenant/budgets", json=budget, headers=bearer(runner))
        ).status_code == 403
        set_to = await http.post("/v1/tenant/budgets", json=budget, headers=bearer(admin))
        assert set_to.status_code == 200 and set_to.json()["mode"] == "enforcing", set_to.text
        async with pool.connection() as conn:  # spent already today
            await conn.execute(
                "INSERT INTO model_journal (run_id, step_id, attempt, model, response,"
                " tokens_in, tokens_out, cost_usd, tenant, agent) VALUES"
                " (%s, 's', 1, 'm', '{}', 5, 5, 0.01, %s, 'default')",
                (f"run-{tenant}-spent", tenant),
            )
        started = await http.post("/v1/runs", json={"task": "Hello."}, headers=bearer(runner))
        assert started.status_code == 429, started.text
        assert 0 < int(started.headers["Retry-After"]) <= 86400
        assert "resets at" in started.json()["error"]["message"]
        shown = await http.get("/v1/tenant/budgets", headers=bearer(admin))
        assert shown.json()[0]["spent_tokens"] == 10 and shown.json()[0]["share"] == 2.0
        costs = await http.get("/v1/costs?by=tenant,agent", headers=bearer(admin))
        assert costs.json() == [
            {
                "tenant": tenant,
                "agent": "default",
                "model": None,
                "key": None,
                "day": None,
                "calls": 1,
                "tokens_in": 5,
                "tokens_out": 5,
                "cost_usd": 0.01,
            }
        ]

        # Schedules: a runner may not make one until the tenant's policy lets runners.
        schedule = {"name": "daily", "task": "Hello.", "cron": "0 9 * * *", "paused": True}
        assert (
            await http.post("/v1/schedules", json=schedule, headers=bearer(viewer))
        ).status_code == 403
        refused = await http.post("/v1/schedules", json=schedule, headers=bearer(runner))
        assert refused.status_code == 409 and "--schedule-role" in refused.text
        made = await http.post("/v1/schedules", json=schedule, headers=bearer(admin))
        assert made.status_code == 201, made.text
        assert made.json()["paused"] and made.json()["next_fires"]
        listed = await http.get("/v1/schedules", headers=bearer(viewer))
        assert [s["name"] for s in listed.json()] == ["daily"]
        other = await make_key(settings, f"other-{uuid.uuid4().hex[:6]}", "admin")
        missing = await http.get("/v1/schedules/daily", headers=bearer(other))
        assert missing.status_code == 404
        resumed = await http.post("/v1/schedules/daily/resume", headers=bearer(admin))
        assert resumed.status_code == 200 and not resumed.json()["paused"]
        gone = await http.post("/v1/schedules/daily/delete", headers=bearer(admin))
        assert gone.status_code == 200, gone.text
