"""The HTTP door, `agentledger serve`: REST, resumable event streams and (in other modules)
other protocols over the same `RunClient`, for callers who hold a key or a token and
nothing else.

A layer of its own beside the CLI: it imports the client (`agentledger.client`) and below,
and nothing imports it but the CLI's `serve`.

Adding a route (another module, say `agentledger.http.inbox`): declare it, with the role
it needs, the body or query it takes (a pydantic model: agentledger.http.bodies) and the
answer it gives, and write the handler over the caller's view:

    async def pending(call: Call[ApprovalsQuery]) -> list[InboxItem]:
        \"\"\"The approvals your tenant's runs wait for.\"\"\"   # the route's summary
        return await call.runs.runs.pending_approvals(limit=call.input.limit)

    ENDPOINTS = [Endpoint("GET", "/v1/approvals", pending, "viewer",
                          query=ApprovalsQuery, answer=list[InboxItem])]

    def routes() -> list[Route]:
        return routes_of(ENDPOINTS)

then list it in `create_app` (agentledger.http.app). The declaration checks the
credential (401), then the role (403), then reads and validates the body (400, 408, 413),
in that order on every route (agentledger.http.endpoints), and `/openapi.json` and
`/docs` describe it from the same models. `call.who` is the only way a handler learns the
tenant; its `identity` is who decides (the `by` of a decision); `call.runs` acts as the
caller, within its tenant alone. Raise an `AgentLedgerError` (mapped to 400/404/409/503)
or an `HttpRefusal` for the door's own; a streamed answer takes a slot of the
credential's streams (`door_of(request).streams`) and ends when the credential does
(agentledger.http.events_api shows how).

Tests: `tests.http_support` starts the door as `agentledger serve --port 0` in a
subprocess on the test's settings (`async with served(settings, tmp_path, env={...}) as
door:`, `door.url`, `door.kill()`), makes keys as the operator does (`make_key(settings,
tenant, role)`, sent with `bearer(key)`), reads a text/event-stream (`sse_events`), and
plays an OIDC issuer (`Issuer`); requests go with `httpx`.
"""
