"""The operator's policy over the HTTP door, on the real stack (`agentledger serve` in a
subprocess, keys in Postgres, a worker on the test's queue): each test is one of the defects
found on the door before its policy was the operator's, tried as its caller would.

- a runner's start without an agent, or a backlog task with its own spec, ran a tool the
  only profile stops for approval;
- a plain approver key that said `"role": "finance"` decided a `finance` step;
- "asked by" was the body's `user`; the key that started a run was recorded nowhere; a
  receipt named an approver `key:<id>` although its key had a name;
- an Idempotency-Key reused with another body answered the first run as if it were new.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger import RunClient
from agentledger.core.backlog_models import child_run_id
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import RunNotFound
from tests.http_support import bearer, make_key, served
from tests.support import (
    NOTIFY_TASK,
    answered_status,
    eventually,
    rows,
    wait_pending,
    wait_status,
)
from tests.test_cli import run_cli
from tests.test_http import eventually_receipt

TICKET = {"title": "Refund for order 42", "body": "The customer asked twice."}
TICKET_TASK = f"call create_ticket {json.dumps(TICKET)}"
# The operator's only profile: every ticket waits for approval, a message for finance.
PROFILE = {
    "desk": {
        "instructions": "You help the support desk.",
        "tools": ["search_notes", "send_message", "create_ticket"],
        "approval": {"always": ["create_ticket"], "roles": {"send_message": "finance"}},
    }
}


def tenant_name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def profiles_file(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "agents.yaml"
    path.write_text(json.dumps(PROFILE))
    return {"AGENTLEDGER_AGENTS": str(path)}


async def task_waits(client: Client, run_id: str) -> Any:
    """The approval a backlog task's run waits for, once the backlog has started it."""

    async def probe() -> Any:
        try:
            state = await answered_status(client, run_id)
        except RunNotFound:  # the backlog has not started it yet
            return None
        return state.pending_approval if state is not None else None

    return await eventually(probe, seconds=90, what=f"{run_id} to wait for approval")


async def test_a_runner_cannot_sidestep_the_approvals_the_operator_set(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """A start naming no agent runs the operator's only profile, so its ticket waits for
    approval; so does a backlog task whose own spec drops the approvals; a task with an agent
    of its own (a free-form spec) or more tools than the agent's is refused to a runner; and
    the tenant's own rule holds even for an admin's free-form spec."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    admin = await make_key(settings, tenant, "admin")
    env = profiles_file(tmp_path)
    async with worker(), served(settings, tmp_path, env=env) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs", json={"task": TICKET_TASK}, headers=bearer(runner)
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            pending = await wait_pending(client, run_id, seconds=60)
            assert (pending.tool, pending.arguments) == ("create_ticket", TICKET)

            # A task's own spec that drops the approvals: it names no agent, so it runs the
            # tenant's default agent (the only profile), whose approvals it cannot drop.
            own_spec = {"task": TICKET_TASK, "approval": {"always": []}}
            held = await http.post(
                "/v1/backlogs/desk/tasks",
                json={"tasks": [{"title": "x", "idempotency_key": "held", "spec": own_spec}]},
                headers=bearer(runner),
            )
            assert held.status_code == 200, held.text
            task_run = child_run_id("desk", "held", 1)
            pending = await task_waits(client, task_run)
            assert pending.tool == "create_ticket"
            # An agent of its own is a free-form spec: not a runner's to send.
            free = await http.post(
                "/v1/backlogs/desk/tasks",
                json={
                    "tasks": [
                        {
                            "title": "x",
                            "idempotency_key": "free",
                            "spec": {**own_spec, "agent": "mine"},
                        }
                    ]
                },
                headers=bearer(runner),
            )
            assert free.status_code == 403, free.text
            assert "free-form spec" in free.json()["error"]["message"]
            widened = await http.post(
                "/v1/backlogs/desk/tasks",
                json={
                    "tasks": [
                        {
                            "title": "x",
                            "idempotency_key": "wide",
                            "spec": {**own_spec, "allowed_tools": ["create_ticket", "fetch_page"]},
                        }
                    ]
                },
                headers=bearer(runner),
            )
            assert widened.status_code == 403 and "fetch_page" in widened.text, widened.text

            # The tenant's rule: every ticket waits for an approver, whatever a spec says.
            async with RunClient.lazy(settings) as operator:
                await operator.tenants.set_policy(tenant, {"rules": [{"tool": "create_ticket"}]})
            mine = await http.post(
                "/v1/runs",
                json={"task": TICKET_TASK},
                headers={**bearer(admin), "Idempotency-Key": "admins-own"},
            )
            assert mine.status_code == 201, mine.text
            pending = await wait_pending(client, mine.json()["run_id"], seconds=60)
            assert pending.tool == "create_ticket"
        for each in (run_id, task_run, mine.json()["run_id"]):
            async with RunClient.lazy(settings) as operator:
                await operator.runs.cancel(each)


async def test_a_decision_is_made_in_the_credentials_role_by_its_identity(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """A plain approver key that says `"role": "finance"` is refused (403); a key that decides
    in finance approves. The run's requester is the key that started it (not the body's
    `user`, kept as "on behalf of"), recorded in `run.started`, the inbox and the receipt,
    which names each key by the name it was made with."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner", name="ci runner")
    plain = await make_key(settings, tenant, "approver", name="plain approver")
    maria = await make_key(
        settings, tenant, "approver", name="maria (refunds)", approval_roles=["finance"]
    )
    runner_id, plain_id = runner.split("_")[1], plain.split("_")[1]
    claimed = f"key:{plain_id} (the CFO)"
    async with worker(), served(settings, tmp_path, env=profiles_file(tmp_path)) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs",
                json={"task": NOTIFY_TASK, "user": claimed},
                headers=bearer(runner),
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            pending = await wait_pending(client, run_id, seconds=60)
            assert (pending.tool, pending.required_role) == ("send_message", "finance")
            assert pending.requester is not None and pending.requester.id == runner_id

            said = await http.post(
                f"/v1/runs/{run_id}/approve", json={"role": "finance"}, headers=bearer(plain)
            )
            assert said.status_code == 403, said.text
            assert "'finance'" in said.json()["error"]["message"]

            async def inbox() -> list[dict[str, Any]]:
                return (await http.get("/v1/approvals", headers=bearer(maria))).json()

            [item] = await eventually(inbox, what="the inbox to list the run")
            assert item["requester"]["name"] == "ci runner" and item["user"] == claimed

            decided = await http.post(f"/v1/runs/{run_id}/approve", json={}, headers=bearer(maria))
            assert decided.status_code == 200, decided.text
            assert decided.json()["decision"] == "approved"
            await wait_status(client, run_id, "completed", seconds=60)
    receipt = await eventually_receipt(pool, run_id)
    assert receipt["requester"] == {
        "kind": "key",
        "id": runner_id,
        "name": "ci runner",
        "email": None,
    }
    assert receipt["user"] == claimed  # what the body said: on behalf of, never the identity
    [approval] = receipt["approvals"]
    assert (approval["by"], approval["role"]) == ("maria (refunds)", "finance")
    assert approval["decider"]["id"] == maria.split("_")[1]
    started_event = await rows(
        pool, "SELECT data FROM events WHERE run_id = %s AND type = 'run.started'", run_id
    )
    assert started_event[0]["data"]["requester"]["name"] == "ci runner"
    mirrored = await rows(pool, "SELECT requester FROM runs WHERE run_id = %s", run_id)
    assert mirrored[0]["requester"]["id"] == runner_id


async def test_the_requester_cannot_approve_and_two_people_must(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """The tenant's admin turns the two-person rule on over HTTP; whoever asked for the run
    may not approve it; one approval is counted, not applied; the same person twice is
    refused; the second person's approval runs the call, and the receipt names both."""
    tenant = tenant_name()
    admin = await make_key(settings, tenant, "admin", name="ops admin")
    ana = await make_key(settings, tenant, "approver", name="ana")
    bo = await make_key(settings, tenant, "approver", name="bo")
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            policy = await http.put(
                "/v1/tenant/policy", json={"two_person": True}, headers=bearer(admin)
            )
            assert policy.status_code == 200, policy.text
            assert policy.json()["two_person"] is True
            refused = await http.put(
                "/v1/tenant/policy", json={"two_person": False}, headers=bearer(ana)
            )
            assert refused.status_code == 403
            started = await http.post("/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(admin))
            run_id = started.json()["run_id"]
            pending = await wait_pending(client, run_id, seconds=60)
            assert pending.approvals_needed == 2

            async def approve(key: str) -> httpx.Response:
                return await http.post(f"/v1/runs/{run_id}/approve", json={}, headers=bearer(key))

            own = await approve(admin)
            assert own.status_code == 409 and "asked for this run" in own.text, own.text
            first = await approve(ana)
            assert first.status_code == 200, first.text
            assert first.json()["decision"] == "counted", first.json()
            again = await approve(ana)
            assert again.status_code == 409 and "approved this call already" in again.text
            second = await approve(bo)
            assert second.json()["decision"] == "approved", second.text
            await wait_status(client, run_id, "completed", seconds=60)
            shown = await http.get("/v1/tenant", headers=bearer(admin))
            assert shown.json()["policy"]["two_person"] is True
    [approval] = (await eventually_receipt(pool, run_id))["approvals"]
    assert approval["by"] == "bo" and [v["by"] for v in approval["votes"]] == ["ana"]


async def test_an_idempotency_key_names_one_request(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    """The same key and body answer the first run; another body under the key is refused,
    naming the first run (409 over HTTP, exit 5 from the CLI)."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    async with served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            headers = {**bearer(runner), "Idempotency-Key": "refund-42"}
            first = await http.post("/v1/runs", json={"task": NOTIFY_TASK}, headers=headers)
            assert first.status_code == 201, first.text
            run_id = first.json()["run_id"]
            other = await http.post("/v1/runs", json={"task": "Refund everyone."}, headers=headers)
            assert other.status_code == 409, other.text
            error = other.json()["error"]
            assert error["run_id"] == run_id and run_id in error["message"]
            same = await http.post("/v1/runs", json={"task": NOTIFY_TASK}, headers=headers)
            assert (same.status_code, same.json()) == (
                200,
                {"run_id": run_id, "existing": True, "said": None},
            )
    home = tmp_path / "home"
    key = f"cli-{uuid.uuid4().hex[:6]}"
    made = await run_cli(settings, home, "start", "--task", "Say hi.", "--idempotency-key", key)
    assert made.code == 0, made.err
    changed = await run_cli(
        settings, home, "start", "--task", "Say bye.", "--idempotency-key", key, "--json"
    )
    assert changed.code == 5, changed.err
    assert json.loads(changed.err)["error"]["kind"] == "idempotency_conflict"
    async with RunClient.lazy(settings) as operator:
        await operator.runs.cancel(operator.runs.id_of(key))
        await operator.runs.cancel(run_id)


async def test_tenants_set_and_show_the_policy(settings: AgentLedgerConfig, tmp_path: Path) -> None:
    tenant = tenant_name()
    home = tmp_path / "home"
    made = await run_cli(
        settings, home, "tenants", "set", tenant, "--free-form", "runner",
        "--rule", "refund_order when cents > 5000 by finance x2",
        "--rule", "deny drop_table", "--two-person", "yes", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.json()["policy"]["rules"][0] == {
        "tool": "refund_order",
        "when": "cents > 5000",
        "role": "finance",
        "approvers": 2,
        "deny": False,
    }
    shown = await run_cli(settings, home, "tenants", "show", tenant)
    assert shown.code == 0, shown.err
    assert "rule: refund_order when cents > 5000 by finance x2" in shown.out
    assert "rule: deny drop_table" in shown.out and "two-person rule: on" in shown.out
    bad = await run_cli(settings, home, "tenants", "set", tenant, "--rule", "x when cents >> 1")
    assert bad.code == 2 and "cannot read" in bad.err, bad.err
    wrong = await run_cli(settings, home, "tenants", "set", tenant, "--free-form", "viewer")
    assert wrong.code == 2 and "free_form" in wrong.err, wrong.err
