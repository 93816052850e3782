"""The HTTP door facing the internet, as an attacker and a careless client meet it:
`agentledger serve` in a subprocess, raw sockets and `httpx`, forged proxy headers,
connections that never finish, bodies before credentials, JSON built to hurt, ids that
are not runs, event ids that are not ids, a revoked key's open stream, tokens from clocks
and keys that disagree."""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import jwt
import pytest
from psycopg_pool import AsyncConnectionPool

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.dev.offline_model import OfflineModelServer, Reply, offline_planner
from tests.http_support import Issuer, bearer, make_key, served, sse_events
from tests.support import NOTIFY_TASK, wait_pending
from tests.test_cli import run_cli
from tests.test_http import RUN_ROUTES, tenant_name

# Failed authentications a test makes on purpose must not lock its own address out.
LENIENT = {"AGENTLEDGER_HTTP_AUTH_FAILURES": "10000"}


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def loopback(address: str) -> httpx.AsyncHTTPTransport:
    """Requests from another loopback address: another client, as the door sees it."""
    return httpx.AsyncHTTPTransport(local_address=address)


async def test_proxy_headers_are_believed_from_trusted_proxies_alone(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """With --proxy-headers, X-Forwarded-For is read only from a trusted proxy (loopback by
    default), right to left: a client that is no proxy cannot pick the address it is
    counted by, and an address forged at the left of a proxy's header counts for nothing."""
    key = await make_key(settings, tenant_name(), "viewer")
    limits = {
        "AGENTLEDGER_HTTP_AUTH_FAILURES": "3",
        "AGENTLEDGER_HTTP_AUTH_FAILURE_WINDOW_SECONDS": "60",
    }
    async with served(settings, tmp_path, "--proxy-headers", env=limits) as door:
        # 127.0.0.2 is no proxy: each guess names another address, all count as its own.
        async with httpx.AsyncClient(base_url=door.url, transport=loopback("127.0.0.2")) as http:
            codes = [
                (
                    await http.get(
                        "/v1/runs",
                        headers={
                            **bearer(f"ark_guess{i}_x"),
                            "X-Forwarded-For": f"198.51.100.{i}",
                        },
                    )
                ).status_code
                for i in range(5)
            ]
            assert codes == [401, 401, 401, 429, 429]
        # Through the trusted proxy, the address it saw (the rightmost) is counted: failures
        # that name a victim at the left lock out the guesser, never the victim.
        victim = "203.0.113.50"
        async with httpx.AsyncClient(base_url=door.url) as http:
            for i in range(4):
                forged = await http.get(
                    "/v1/runs",
                    headers={
                        **bearer(f"ark_guess{i}_x"),
                        "X-Forwarded-For": f"{victim}, 192.0.2.7",
                    },
                )
            assert forged.status_code == 429, forged.text
            own = await http.get("/v1/runs", headers={**bearer(key), "X-Forwarded-For": victim})
            assert own.status_code == 200, own.text
    # Trusting every address would undo it: refused at start, saying what to name instead.
    refused = await run_cli(
        settings, tmp_path, "serve", "--port", "0", "--proxy-headers", "--trusted-proxy", "*"
    )
    assert refused.code == 2 and "10.0.0.0/8" in refused.err, refused.err


def enough_files(count: int) -> None:
    """This test process opens `count` sockets: raise its own limit, or skip saying why."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= count:
        return
    if hard != resource.RLIM_INFINITY and hard < count:
        pytest.skip(f"this test opens {count} sockets; `ulimit -Hn` is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


async def test_connections_that_never_finish_their_headers_hold_nothing_for_long(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """1,100 connections from one address that never finish their headers, against a
    server that may open 1,024 files: past the per-address limit each is answered 429 and
    closed at once, the rest 408 when their headers are late; /healthz answers others
    throughout, and the log says so once per kind, not once per connection."""
    enough_files(1500)
    env = {"AGENTLEDGER_HTTP_HEADER_TIMEOUT_SECONDS": "3"}
    async with served(settings, tmp_path, env=env, open_files=1024) as door:
        url = urlsplit(door.url)
        assert url.hostname is not None and url.port is not None
        held = []
        for opened in range(1100):
            connecting = asyncio.open_connection(
                url.hostname, url.port, local_addr=("127.0.0.2", 0)
            )
            try:
                reader, writer = await asyncio.wait_for(connecting, 5)
            except TimeoutError:
                pytest.fail(f"the door stopped accepting connections after {opened}")
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: door\r\nX-Slow: ")  # never ends
            held.append((reader, writer))
        async with httpx.AsyncClient(base_url=door.url, timeout=5) as http:
            began = time.monotonic()
            assert (await http.get("/healthz")).status_code == 200
            assert time.monotonic() - began < 2

        async def answer(reader: asyncio.StreamReader) -> str:
            try:
                head = await asyncio.wait_for(reader.read(200), 15)
            except ConnectionResetError:
                return "reset"  # refused and closed with the request unread
            return head.split(b" ", 2)[1].decode() if head else "closed"

        answers = Counter(await asyncio.gather(*(answer(reader) for reader, _ in held)))
        for _, writer in held:
            writer.close()
        assert answers["408"] == 100, answers  # AGENTLEDGER_HTTP_CONNECTIONS_PER_ADDRESS
        assert answers["429"] + answers["reset"] == 1000 and answers["429"] > 0, answers
        async with httpx.AsyncClient(base_url=door.url, timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
        log = door.log()
    assert log.count("refused connections from 127.0.0.2") == 1, log
    assert log.count("request headers took over 3 s") == 1, log
    assert len(log) < 2000, log


@pytest.mark.parametrize("path", ["/v1/runs", "/a2a/support-desk", "/mcp"])
async def test_a_body_that_stalls_is_answered_408_and_its_connection_closed(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path, path: str
) -> None:
    runner = await make_key(settings, tenant_name(), "runner")
    env = {
        "AGENTLEDGER_HTTP_BODY_TIMEOUT_SECONDS": "1",
        "AGENTLEDGER_HTTP_HEADER_TIMEOUT_SECONDS": "2",
    }
    async with served(settings, tmp_path, env=env) as door:
        url = urlsplit(door.url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: door\r\nContent-Type: application/json\r\n".encode()
            + f"Authorization: Bearer {runner}\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"task": '
        )
        began = time.monotonic()
        first = await asyncio.wait_for(reader.read(1), 10)
        assert 1 <= time.monotonic() - began < 5
        # The rest of the body never comes: after the answer the connection is closed.
        answer = first + await asyncio.wait_for(reader.read(), 10)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"AGENTLEDGER_HTTP_BODY_TIMEOUT_SECONDS" in answer
        writer.close()


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


async def test_the_credential_is_checked_before_any_body_is_read_on_every_route(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """Every route the API describes answers 401 to a request without a valid credential,
    whatever its body (JSON nested 100,000 deep, an AG-UI input missing its fields), and a
    route whose role the credential lacks answers 403 before its body is read."""
    viewer = await make_key(settings, tenant_name(), "viewer")
    async with served(settings, tmp_path, env=LENIENT) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=30) as http:
            described = (await http.get("/openapi.json")).json()
            routes = [
                (method.upper(), path.replace("{run_id}", "run-x").replace("{agent}", "a"))
                for path, methods in described["paths"].items()
                for method in methods
            ]
            assert len(routes) >= 18
            for method, path in routes:
                for body in (deep(100_000), b'{"threadId": 1}', b"{not json"):
                    for headers in ({}, bearer("ark_0000000000000000_" + "x" * 43)):
                        refused = await http.request(method, path, content=body, headers=headers)
                        assert refused.status_code == 401, (method, path, refused.text)
                        assert refused.json()["error"]["kind"] == "unauthenticated"
                # A hook's delivery proves itself by its signature, not by a credential.
                if method == "POST" and not path.startswith("/v1/hooks/"):
                    forbidden = await http.request(
                        method, path, content=deep(100_000), headers=bearer(viewer)
                    )
                    assert forbidden.status_code == 403, (path, forbidden.text)


async def test_json_too_deep_or_unreadable_is_refused_with_400(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    runner = await make_key(settings, tenant_name(), "runner")
    async with served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=30) as http:
            for body, says in (
                (deep(100_000), "deeper than 32"),
                (b'{"task": "x", "user": ' + deep(33) + b"}", "deeper than 32"),
                (b'{"task": 1' + b"0" * 5000 + b"}", "not JSON this server reads"),
                (b'{"task": NaN}', "not JSON"),
                (b'{"task": "\xff"}', "UTF-8"),
                (b'{"task": "x", "priority": true}', "priority"),
                (b'{"task": "x", "tenant": "other"}', "the tenant is your credential's"),
            ):
                refused = await http.post("/v1/runs", content=body, headers=bearer(runner))
                assert refused.status_code == 400, (body[:40], refused.text)
                assert says in refused.json()["error"]["message"], refused.text


async def test_an_id_that_is_not_a_run_reads_as_a_missing_run(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    """A backlog's workflow id, on every run route and in the CLI's `status`, reads exactly
    as a missing run: the same 404, the same exit code, no traceback."""
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "admin")
    agent = f"desk{uuid.uuid4().hex[:6]}"
    backlog_id = f"backlog-{agent}"
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            task = {"title": "t", "idempotency_key": "k1", "spec": {"task": NOTIFY_TASK}}
            queued = await http.post(
                f"/v1/backlogs/{agent}/tasks", json={"tasks": [task]}, headers=bearer(runner)
            )
            assert queued.status_code == 200, queued.text
            missing_id = f"{backlog_id}-x"
            for run_id in (backlog_id, "run-x\x00y", "\u00b2"):
                for method, tail, body in RUN_ROUTES:
                    named, missing = [
                        await http.request(
                            method,
                            f"/v1/runs/{quote(each, safe='')}{tail}",
                            json=body,
                            headers=bearer(runner),
                        )
                        for each in (run_id, missing_id)
                    ]
                    assert named.status_code == missing.status_code == 404, (tail, named.text)
                    said, expected = named.json()["error"], missing.json()["error"]
                    assert said["kind"] == expected["kind"]
                    assert said["message"].replace(repr(run_id), "ID") == expected[
                        "message"
                    ].replace(repr(missing_id), "ID"), (tail, said)
            # An id past any run id's bound is refused as input, alike on every route.
            for method, tail, body in RUN_ROUTES:
                long = await http.request(
                    method, f"/v1/runs/{'a' * 600}{tail}", json=body, headers=bearer(runner)
                )
                assert long.status_code == 400, (tail, long.text)
                assert "run_id: 600 characters, over the limit of 500" in long.text
    for scope in (("--tenant", tenant), ()):
        status = await run_cli(settings, tmp_path, "status", backlog_id, *scope)
        assert status.code == 3, (status.out, status.err)
        assert "Traceback" not in status.err and "no run" in status.err, status.err
    await client.get_workflow_handle(backlog_id).terminate("test over")


def fails_once() -> Any:
    calls = 0

    def plan(request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Reply({"error": {"message": "the provider is overloaded"}}, status=503)
        return offline_planner(request)

    return plan


async def test_every_streamed_event_has_an_id_to_resume_from(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    """A run whose model call is retried: every event of its stream carries an id (the
    retry too), events are separated by LF alone, a stream resumed from any id gets what
    followed it once, and an id the stream never sent is refused with 400 saying what to
    send."""
    runner = await make_key(settings, tenant_name(), "runner")
    with OfflineModelServer(fails_once()) as model:
        async with worker(base_url=model.base_url), served(settings, tmp_path) as door:
            async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
                started = await http.post(
                    "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(runner)
                )
                run_id = started.json()["run_id"]
                await wait_pending(client, run_id, seconds=60)
                url = f"/v1/runs/{run_id}/events"

                async def told(last: str | None = None) -> list[tuple[str | None, dict[str, Any]]]:
                    """The stream up to the pending approval: (id, item) for each event."""
                    headers = bearer(runner) | ({"Last-Event-ID": last} if last else {})
                    seen: list[tuple[str | None, dict[str, Any]]] = []
                    async with (
                        asyncio.timeout(30),
                        http.stream("GET", url, headers=headers) as stream,
                    ):
                        raw = b""
                        async for chunk in stream.aiter_raw():
                            raw += chunk
                            if b"approval.requested" in raw and raw.endswith(b"\n\n"):
                                break
                    assert b"\r" not in raw
                    for block in raw.decode().split("\n\n"):
                        fields = dict(
                            line.split(": ", 1) for line in block.splitlines() if ": " in line
                        )
                        if "data" in fields:
                            seen.append((fields.get("id"), json.loads(fields["data"])))
                    return seen

                whole = await told()
                ids = [event_id for event_id, _ in whole]
                assert all(event_id is not None for event_id in ids), ids
                assert len(set(ids)) == len(ids), ids
                retried = [i for i, (_, item) in enumerate(whole) if item["type"] == "step.retry"]
                assert retried, [item["type"] for _, item in whole]
                at = retried[0]
                resumed = await told(ids[at])
                assert resumed == whole[at + 1 :]
                for bad in ("None", "²", "9" * 5000, "-1", "1.0", "x"):
                    headers = {**bearer(runner), "Last-Event-ID": bad.encode()}
                    refused = await http.get(url, headers=headers)
                    assert refused.status_code == 400, (bad[:10], refused.text)
                    assert "such as 12 or 12.3" in refused.json()["error"]["message"]
                    after = await http.get(f"{url}?after={bad[:100]}", headers=bearer(runner))
                    assert after.status_code == 400, after.text


async def test_revoking_a_key_ends_its_open_streams_within_a_second(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    viewer = await make_key(settings, tenant, "viewer")
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs", json={"task": NOTIFY_TASK}, headers=bearer(runner)
            )
            run_id = started.json()["run_id"]
            await wait_pending(client, run_id, seconds=60)
            revoked_at = None
            ended: list[Any] = []
            async with (
                asyncio.timeout(30),  # a stream that outlives its key would never end
                http.stream("GET", f"/v1/runs/{run_id}/events", headers=bearer(viewer)) as stream,
            ):
                async for event in sse_events(stream):
                    if revoked_at is None and "approval.requested" in event.data:
                        async with RunClient.lazy(settings) as operator:
                            await operator.keys.revoke(viewer.split("_")[1])
                        revoked_at = time.monotonic()
                    elif revoked_at is not None:
                        ended.append(event)
            assert revoked_at is not None
            took = time.monotonic() - revoked_at
            assert took < 1.0, took
            assert [e.event for e in ended] == ["error"], ended
            assert "revoked" in json.loads(ended[0].data)["error"]["message"]
            again = await http.get(f"/v1/runs/{run_id}/events", headers=bearer(viewer))
            assert again.status_code == 401


async def test_oidc_tokens_with_a_wrong_algorithm_a_skewed_clock_or_a_bad_tenant(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """A token whose `alg` is not its key's is refused (401, not a failure of the server);
    one issued by a clock a few seconds ahead is accepted (60 s of leeway by default); a
    tenant claim that is not a tenant name (two such names would share run ids) is refused."""
    issuer = Issuer("https://id.example")
    tenant = tenant_name()
    now = int(time.time())
    with issuer.server:
        async with served(settings, tmp_path, env={**issuer.settings(), **LENIENT}) as door:
            async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:

                async def status_of(token: str) -> tuple[int, str]:
                    answer = await http.get("/v1/runs", headers=bearer(token))
                    return answer.status_code, answer.text

                claims = {"iss": issuer.name, "aud": "agentledger", "sub": "bo", "tenant": tenant}
                claims |= {"roles": ["viewer"], "exp": now + 600}
                signed = jwt.encode(claims, issuer.key, "RS256", headers={"kid": issuer.kid})
                for alg in ("ES256", "PS256", "HS256", "none"):
                    # The RSA key's signature under a header that names another algorithm.
                    header = json.dumps({"alg": alg, "kid": issuer.kid, "typ": "JWT"}).encode()
                    forged = ".".join([b64(header), *signed.split(".")[1:]])
                    code, text = await status_of(forged)
                    assert code == 401 and "not accepted" in text, (alg, text)
                ahead = issuer.token("bo", tenant, ["viewer"], iat=now + 5, nbf=now + 5)
                assert await status_of(ahead) == (200, "[]")
                late = issuer.token("bo", tenant, ["viewer"], exp=now - 120)
                assert (await status_of(late))[0] == 401
                for name in ("acme/eu", f"acme-eu-{'0' * 8}~x", "", "x" * 201, "t\u00e9"):
                    code, text = await status_of(issuer.token("bo", name, ["viewer"]))
                    assert code == 401, (name, text)
                assert (await status_of(issuer.token("bo", "acme-eu.1_2", ["viewer"])))[0] == 200


async def test_approving_a_run_that_waits_for_nothing_answers_409(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, client: Any, tmp_path: Path
) -> None:
    tenant = tenant_name()
    approver = await make_key(settings, tenant, "approver")
    scoped = settings.model_copy(update={"tenant": tenant})
    async with worker(), served(settings, tmp_path) as door:
        async with RunClient.lazy(scoped) as runs:
            session = await runs.runs.start(
                task="Tell me about refunds.", allowed_tools=[], session={"idle_timeout": 600}
            )
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            path = f"/v1/runs/{session.run_id}"
            for tail, body in (("/approve", {}), ("/reject", {"reason": "no"})):
                refused = await http.post(path + tail, json=body, headers=bearer(approver))
                assert refused.status_code == 409, refused.text
                assert refused.json()["error"]["kind"] == "refused"
                assert "not waiting for an approval" in refused.json()["error"]["message"]
        await client.get_workflow_handle(session.run_id).terminate("test over")
