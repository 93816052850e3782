"""The HTTP door on the real stack: `agentledger serve` in a subprocess, keys in Postgres, a
worker serving the test's task queue, `httpx` as the client."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.dev.stack import free_port
from tests.http_support import Issuer, bearer, make_key, served, sse_events
from tests.support import NOTIFY_TASK, eventually, rows, wait_pending
from tests.test_cli import run_cli


def tenant_name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


async def test_a_key_decides_the_tenant_and_its_role(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    ours, theirs = tenant_name(), tenant_name()
    runner = await make_key(settings, ours, "runner")
    viewer = await make_key(settings, ours, "viewer")
    approver = await make_key(settings, ours, "approver")
    other = await make_key(settings, theirs, "admin")
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs",
                json={"task": NOTIFY_TASK},
                headers={**bearer(runner), "Idempotency-Key": "first"},
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            assert run_id == f"run-{ours}~first"
            again = await http.post(
                "/v1/runs",
                json={"task": NOTIFY_TASK},
                headers={**bearer(runner), "Idempotency-Key": "first"},
            )
            assert (again.status_code, again.json()["run_id"]) == (200, run_id)
            await wait_pending(client, run_id, seconds=60)

            own = await http.get(f"/v1/runs/{run_id}", headers=bearer(viewer))
            assert own.status_code == 200 and own.json()["status"] == "waiting_for_approval"
            # Another tenant's run reads exactly as a missing one.
            foreign = await http.get(f"/v1/runs/{run_id}", headers=bearer(other))
            missing = await http.get(f"/v1/runs/{run_id}-x", headers=bearer(other))
            assert foreign.status_code == missing.status_code == 404
            assert foreign.content == missing.content.replace(
                f"{run_id}-x".encode(), run_id.encode()
            )

            refused = await http.post(f"/v1/runs/{run_id}/approve", headers=bearer(viewer))
            assert refused.status_code == 403, refused.text
            decided = await http.post(f"/v1/runs/{run_id}/approve", headers=bearer(approver))
            assert decided.status_code == 200, decided.text
            assert decided.json()["decision"] == "approved"

            # Bad input is refused, naming what is wrong.
            for body, says in (
                (b"{not json", "not JSON"),
                (b'{"task": "x", "colour": "red"}', "colour"),
                (b'{"agent": "nobody", "task": "x"}', "nobody"),
                (b"[]", "JSON object"),
            ):
                bad = await http.post("/v1/runs", content=body, headers=bearer(runner))
                assert bad.status_code == 400 and says in bad.json()["error"]["message"]
            # The API describes itself, with no credential and no CDN.
            described = (await http.get("/openapi.json")).json()
            assert "post" in described["paths"]["/v1/runs/{run_id}/approve"]
            page = await http.get("/docs")
            assert "/v1/runs/{run_id}/events" in page.text and "<script" not in page.text


async def test_a_stream_resumes_after_the_server_is_killed_with_every_event_once(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    seen: list[int] = []
    async with worker():
        async with served(settings, tmp_path) as door, httpx.AsyncClient(timeout=60) as http:
            started = await http.post(
                f"{door.url}/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(runner)
            )
            run_id = started.json()["run_id"]
            await wait_pending(client, run_id, seconds=60)
            async with http.stream(
                "GET", f"{door.url}/v1/runs/{run_id}/events", headers=bearer(runner)
            ) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                async for event in sse_events(stream):
                    if event.event == "event":
                        assert event.id is not None
                        seen.append(int(event.id))
                        if len(seen) == 3:  # the server dies under the open stream
                            door.kill()
                            await door.process.wait()
                            break
        assert len(seen) == 3
        async with served(settings, tmp_path) as door, httpx.AsyncClient(timeout=60) as http:
            decided = await http.post(
                f"{door.url}/v1/runs/{run_id}/approve", headers=bearer(approver)
            )
            assert decided.status_code == 200, decided.text
            receipt = None
            async with http.stream(
                "GET",
                f"{door.url}/v1/runs/{run_id}/events",
                headers={**bearer(runner), "Last-Event-ID": str(seen[-1])},
            ) as stream:
                async for event in sse_events(stream):
                    if event.event == "event":
                        assert event.id is not None
                        seen.append(int(event.id))
                    elif event.event == "receipt":
                        receipt = json.loads(event.data)["data"]
    mirrored = await rows(pool, "SELECT seq FROM events WHERE run_id = %s ORDER BY seq", run_id)
    assert seen == [row["seq"] for row in mirrored]  # every event once, in order
    assert receipt is not None and receipt["outcome"] == "completed"
    # The decision is recorded with the identity of the key that made it.
    approval = receipt["approvals"][0]
    assert approval["decision"] == "approved" and approval["by"].startswith("key:")


# Every route that names a run, with a body it takes: another tenant's run must read as a
# missing one on each.
RUN_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "", None),
    ("GET", "/receipt", None),
    ("GET", "/steps", None),
    ("GET", "/events", None),
    ("POST", "/approve", {}),
    ("POST", "/reject", {"reason": "no"}),
    ("POST", "/pause", {}),
    ("POST", "/resume", {}),
    ("POST", "/cancel", {}),
    ("POST", "/say", {"text": "hello"}),
    ("POST", "/turns", {"text": "hello"}),
    ("POST", "/end", {}),
    ("POST", "/fork", {"from_step": 1}),
]


async def test_each_tenant_reaches_only_its_own_runs_by_key_or_token(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    ours, theirs = tenant_name(), tenant_name()
    issuer, stranger = Issuer("https://id.example"), Issuer("https://evil.example")
    admin = await make_key(settings, ours, "admin")
    with issuer.server, stranger.server:
        token = issuer.token("bo@example.com", theirs, ["admin"])
        async with worker(), served(settings, tmp_path, env=issuer.settings()) as door:
            async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
                started = await http.post(
                    "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(admin)
                )
                run_id = started.json()["run_id"]
                theirs_started = await http.post(
                    "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(token)
                )
                assert theirs_started.status_code == 201, theirs_started.text
                their_run = theirs_started.json()["run_id"]
                await wait_pending(client, run_id, seconds=60)
                await wait_pending(client, their_run, seconds=60)

                async def call(method: str, path: str, body: Any, key: str) -> httpx.Response:
                    return await http.request(method, path, json=body, headers=bearer(key))

                for method, tail, body in RUN_ROUTES:
                    foreign = await call(method, f"/v1/runs/{run_id}{tail}", body, token)
                    missing = await call(method, f"/v1/runs/{run_id}-x{tail}", body, token)
                    assert foreign.status_code == missing.status_code == 404, (tail, foreign.text)
                    same = missing.content.replace(f"{run_id}-x".encode(), run_id.encode())
                    assert foreign.content == same, (tail, foreign.text, missing.text)
                # Lists hold the caller's own runs alone.
                own = await http.get("/v1/runs", headers=bearer(token))
                assert [r["run_id"] for r in own.json()] == [their_run]
                # No header, query parameter or body field changes the tenant.
                named = await http.get(
                    f"/v1/runs/{run_id}?tenant={ours}",
                    headers={**bearer(token), "X-Tenant": ours, "X-AgentLedger-Tenant": ours},
                )
                assert named.status_code == 404
                posed = await http.post(
                    "/v1/runs", json={"task": "x", "tenant": ours}, headers=bearer(token)
                )
                assert posed.status_code == 400 and "credential" in posed.text
                # The token's subject decides, and is recorded as who decided; whoever asked
                # for the run may not approve it (the tenant's policy, by default).
                own_approval = await http.post(
                    f"/v1/runs/{their_run}/approve", json={}, headers=bearer(token)
                )
                assert own_approval.status_code == 409, own_approval.text
                assert "asked for this run" in own_approval.json()["error"]["message"]
                colleague = issuer.token("cy@example.com", theirs, ["approver"])
                decided = await http.post(
                    f"/v1/runs/{their_run}/approve",
                    json={"edit": {"subject": "Edited over HTTP"}},
                    headers=bearer(colleague),
                )
                assert decided.status_code == 200, decided.text
                settings_page = await http.get("/v1/tenant", headers=bearer(token))
                assert settings_page.json()["tenant"] == theirs
                # Tokens from another issuer, or past their expiry, do not open the door.
                for bad in (
                    stranger.token("eve", theirs, ["admin"]),
                    stranger.token("eve", theirs, ["admin"], iss=issuer.name),
                    issuer.token("bo@example.com", theirs, ["admin"], exp=int(time.time()) - 60),
                    issuer.token("bo@example.com", theirs, ["admin"], aud="someone-else"),
                ):
                    denied = await http.get(f"/v1/runs/{their_run}", headers=bearer(bad))
                    assert denied.status_code == 401, denied.text
                    assert denied.headers["www-authenticate"] == "Bearer"
            receipt = await eventually_receipt(pool, their_run)
        # An issuer whose keys cannot be fetched: the door says so (503) and admits no one.
        gone = {
            **issuer.settings(),
            "AGENTLEDGER_OIDC_JWKS_URL": f"http://127.0.0.1:{free_port()}/",
        }
        async with served(settings, tmp_path, env=gone) as door:
            async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
                unreachable = await http.get("/v1/runs", headers=bearer(token))
                assert unreachable.status_code == 503, unreachable.text
                assert "AGENTLEDGER_OIDC_JWKS_URL" in unreachable.json()["error"]["message"]
    assert receipt["approvals"][0]["by"] == "cy@example.com"
    assert receipt["approvals"][0]["decider"]["id"] == "https://id.example#cy@example.com"
    assert receipt["requester"]["id"] == "https://id.example#bo@example.com"
    assert receipt["approvals"][0]["edit"] == {"subject": "Edited over HTTP"}


async def eventually_receipt(pool: AsyncConnectionPool, run_id: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        found = await rows(pool, "SELECT receipt FROM receipts WHERE run_id = %s", run_id)
        return found[0]["receipt"] if found else None

    return await eventually(probe, seconds=60, what=f"{run_id}'s receipt")


async def test_keys_made_listed_and_revoked_by_the_cli_open_and_close_the_door(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    tenant = tenant_name()
    home = tmp_path / "home"
    name = "inbox of the refunds team"
    made = await run_cli(
        settings, home, "keys", "create", "--tenant", tenant, "--role", "viewer", "--json",
        "--name", name,
    )  # fmt: skip
    assert made.code == 0, made.err
    key = made.json()["key"]
    key_id = made.json()["key_id"]
    assert made.json()["name"] == name
    stored = await rows(pool, "SELECT key_hash, name FROM api_keys WHERE key_id = %s", key_id)
    assert stored and key not in str(stored)  # a hash, never the key
    assert stored[0]["name"] == name
    short = await make_key(settings, tenant, "viewer", expires_in=timedelta(seconds=1))
    listed = await run_cli(settings, home, "keys", "list", "--json")
    names = {row["key_id"]: row["name"] for row in listed.json()}
    assert names[key_id] == name and names[short.split("_")[1]] is None
    assert key not in listed.out
    table = await run_cli(settings, home, "keys", "list")
    assert name in table.out
    # A name that is not a label is refused, and no key is made.
    for bad in ("", " ", "x" * 101, "line\nbreak"):
        refused = await run_cli(
            settings, home, "keys", "create", "--tenant", tenant, "--role", "viewer",
            "--name", bad,
        )  # fmt: skip
        assert refused.code == 2 and "--name" in refused.err, refused.err
    after = await run_cli(settings, home, "keys", "list", "--json")
    assert len(after.json()) == len(listed.json())
    async with served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            assert (await http.get("/v1/runs", headers=bearer(key))).status_code == 200
            revoked = await run_cli(settings, home, "keys", "revoke", key_id, "--json")
            assert revoked.code == 0 and revoked.json()["revoked_at"], revoked.err
            await asyncio.sleep(1.1)
            for bad in (key, short, key[:-1] + ("A" if key[-1] != "A" else "B"), "ark_x"):
                denied = await http.get("/v1/runs", headers=bearer(bad))
                assert denied.status_code == 401, denied.text
                assert denied.json()["error"]["kind"] == "unauthenticated"
            assert (await http.get("/v1/runs")).status_code == 401
    unknown = await run_cli(settings, home, "keys", "revoke", "0" * 16)
    assert unknown.code == 3, unknown.err


async def test_limits_answer_429_with_retry_after_and_413(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    other = await make_key(settings, tenant, "runner")
    limits = {
        "AGENTLEDGER_HTTP_REQUESTS_PER_SECOND": "1",
        "AGENTLEDGER_HTTP_STREAMS_PER_KEY": "1",
        "AGENTLEDGER_HTTP_BODY_LIMIT_BYTES": "200",
    }
    async with worker(), served(settings, tmp_path, env=limits) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            big = await http.post("/v1/runs", json={"task": "x" * 300}, headers=bearer(runner))
            assert big.status_code == 413, big.text
            started = await http.post("/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(other))
            run_id = started.json()["run_id"]
            await wait_pending(client, run_id, seconds=60)
            await asyncio.sleep(2.1)  # the bucket fills again
            answers = [(await http.get("/v1/runs", headers=bearer(runner))) for _ in range(3)]
            assert [a.status_code for a in answers[:2]] == [200, 200]
            assert answers[2].status_code == 429 and int(answers[2].headers["retry-after"]) >= 1
            # Another credential has its own share.
            assert (await http.get("/v1/runs", headers=bearer(other))).status_code == 200
            await asyncio.sleep(2.1)
            url = f"/v1/runs/{run_id}/events"
            async with http.stream("GET", url, headers=bearer(other)) as first:
                assert first.status_code == 200
                second = await http.get(url, headers=bearer(other))
                assert second.status_code == 429, second.text
                assert second.headers["retry-after"] == "1"


async def test_an_address_that_fails_to_authenticate_too_often_gets_429_alone(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """Past AGENTLEDGER_HTTP_AUTH_FAILURES failed authentications an address is refused with
    429 and Retry-After, even with a good key; another address's good key still works. The
    address is the peer's (a header cannot move it), or with --proxy-headers the one
    X-Forwarded-For names."""
    key = await make_key(settings, tenant_name(), "viewer")
    limits = {
        "AGENTLEDGER_HTTP_AUTH_FAILURES": "3",
        "AGENTLEDGER_HTTP_AUTH_FAILURE_WINDOW_SECONDS": "60",
    }

    async def guessed(http: httpx.AsyncClient, headers: dict[str, str]) -> list[int]:
        answers = [
            await http.get("/v1/runs", headers={**bearer(f"ark_guess{i}_x"), **headers})
            for i in range(4)
        ]
        assert answers[3].json()["error"]["kind"] == "too_many_failures", answers[3].text
        assert 1 <= int(answers[3].headers["retry-after"]) <= 60
        return [a.status_code for a in answers]

    async with served(settings, tmp_path, env=limits) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            assert await guessed(http, {}) == [401, 401, 401, 429]
            assert (await http.get("/v1/runs", headers=bearer(key))).status_code == 429
            # Without --proxy-headers, X-Forwarded-For is not believed.
            moved = {"X-Forwarded-For": "203.0.113.9"}
            assert (await http.get("/v1/runs", headers={**bearer(key), **moved})).status_code == 429
        # Another address on loopback: its own count, and its good key opens the door.
        elsewhere = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=door.url, timeout=60, transport=elsewhere) as http:
            assert (await http.get("/v1/runs", headers=bearer(key))).status_code == 200

    async with served(settings, tmp_path, "--proxy-headers", env=limits) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            guesser = {"X-Forwarded-For": "203.0.113.7"}
            assert await guessed(http, guesser) == [401, 401, 401, 429]
            answer = await http.get("/v1/runs", headers={**bearer(key), **guesser})
            assert answer.status_code == 429
            honest = {"X-Forwarded-For": "203.0.113.8"}
            answer = await http.get("/v1/runs", headers={**bearer(key), **honest})
            assert answer.status_code == 200, answer.text


async def test_a_runner_drives_its_run_and_backlog_over_http(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant, stranger = tenant_name(), tenant_name()
    runner = await make_key(settings, tenant, "runner")
    other = await make_key(settings, stranger, "runner")
    agent = f"desk{uuid.uuid4().hex[:6]}"
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(runner)
            )
            run_id = started.json()["run_id"]
            await wait_pending(client, run_id, seconds=60)

            async def post(tail: str, body: Any = None) -> dict[str, Any]:
                done = await http.post(
                    f"/v1/runs/{run_id}{tail}", json=body, headers=bearer(runner)
                )
                assert done.status_code in (200, 201), (tail, done.text)
                answer: dict[str, Any] = done.json()
                return answer

            assert (await post("/pause"))["paused"] is True
            assert (await post("/resume"))["paused"] is False
            said = await post("/say", {"text": "Mention the 30-day window."})
            assert said["run_id"] == run_id and said["delivered"] in ("accepted", "recorded")
            fork = await post("/fork", {"from_step": 1, "key": "again"})
            assert fork["run_id"] != run_id and fork["existing"] is False
            assert (await post("/cancel"))["run_id"] == run_id
            receipt = await eventually_receipt(pool, run_id)
            assert receipt["outcome"] == "cancelled" and receipt["tenant"] == tenant
            read = await http.get(f"/v1/runs/{run_id}/receipt", headers=bearer(runner))
            assert read.json()["outcome"] == "cancelled"
            ended = await http.post(f"/v1/runs/{run_id}/pause", headers=bearer(runner))
            assert ended.status_code == 409, ended.text

            task = {"title": "refund", "idempotency_key": "r1", "spec": {"task": NOTIFY_TASK}}
            queued = await http.post(
                f"/v1/backlogs/{agent}/tasks", json={"tasks": [task]}, headers=bearer(runner)
            )
            assert queued.status_code == 200, queued.text

            async def listed() -> list[Any] | None:
                got = await http.get(f"/v1/backlogs/{agent}/tasks", headers=bearer(runner))
                return got.json()["tasks"] if got.status_code == 200 else None

            tasks = await eventually(listed, seconds=60, what="the backlog's mirror")
            assert [t["task_key"] for t in tasks] == ["r1"]
            # Another tenant sees no such backlog; a task naming this tenant is refused.
            theirs = await http.get(f"/v1/backlogs/{agent}/tasks", headers=bearer(other))
            assert theirs.status_code == 404, theirs.text
            poached = {**task, "spec": {"task": NOTIFY_TASK, "tenant": tenant}}
            refused = await http.post(
                f"/v1/backlogs/{agent}/tasks", json={"tasks": [poached]}, headers=bearer(other)
            )
            assert refused.status_code == 409, refused.text


async def test_a_run_that_takes_only_signed_decisions_refuses_an_unsigned_one_over_http(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant = tenant_name()
    scoped = settings.model_copy(update={"tenant": tenant, "config_dir": tmp_path / "keys"})
    async with RunClient.lazy(scoped) as run_client:
        await run_client.approvers.add("ana", role="approver")
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(runner)
            )
            run_id = started.json()["run_id"]
            await wait_pending(client, run_id, seconds=60)
            unsigned = await http.post(f"/v1/runs/{run_id}/approve", headers=bearer(approver))
            assert unsigned.status_code == 409, unsigned.text
            assert unsigned.json()["error"]["kind"] == "refused"
            async with RunClient.lazy(scoped) as run_client:
                signed = await run_client.runs.approve(
                    run_id, by="ana", signer=run_client.approvers.key("ana")
                )
            assert signed.decision == "approved"
            receipt = await eventually_receipt(pool, run_id)
    assert receipt["approvals"][-1]["by"] == "ana" and receipt["approvals"][-1]["key_id"]
