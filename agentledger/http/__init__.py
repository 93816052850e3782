"""The HTTP door, `agentledger serve`: REST, resumable event streams and (in other modules)
other protocols over the same `RunClient`, for callers who hold a key or a token and
nothing else. docs/http.md is the user's page.

A layer of its own beside the CLI: it imports the client (`agentledger.client`) and below,
and nothing imports it but the CLI's `serve`.

Adding routes (another module, say `agentledger/http/agui.py`):

    from agentledger.http.auth import caller, json_body, runs_for
    from agentledger.http.replies import answer

    async def pending(request: Request) -> Response:
        who = await caller(request, need="approver")  # 401/403/429, the tenant decided
        client = runs_for(request, who)                # a RunClient acting as who
        return answer(await client.runs.recent(status="waiting_approval"))

    def routes() -> list[Route]:
        return [Route("/v1/inbox", pending)]

then list it in `create_app` (agentledger/http/app.py) beside `runs_api.routes()` (or pass
`create_app(runs, settings, routes=agui.routes())`). `caller` is the only way a route learns the
tenant; the `Caller`'s `identity` is who decides (the `by` of a decision). Raise an
`AgentLedgerError` (mapped to 400/404/409/503) or an `HttpRefusal` for the door's own;
`json_body` reads within the body limit; `door_of(request).streams` counts a credential's
streams (agentledger/http/events_api.py shows how).

Tests: tests/http_support.py starts the door as `agentledger serve --port 0` in a
subprocess on the test's settings (`async with served(settings, tmp_path, env={...}) as
door:`, `door.url`, `door.kill()`), makes keys as the operator does (`make_key(settings,
tenant, role)`, sent with `bearer(key)`), reads a text/event-stream (`sse_events`), and
plays an OIDC issuer (`Issuer`); requests go with `httpx` (tests/test_http.py).
"""
