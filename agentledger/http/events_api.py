"""GET /v1/runs/{run_id}/events: the run as Server-Sent Events, resumable.

Each of the run's events carries `id:` its sequence number in the run (the mirror's
`events.seq`), model text comes as `event: text` without an id, and the stream ends with
`event: receipt`. A client that comes back with `Last-Event-ID: N` (a browser's
EventSource does by itself) gets every event after N once, in order, whether it lost the
connection or the server restarted: the stream is read again from the run's start and
everything up to N is passed over, so the server keeps nothing per client. A comment line
every `KEEPALIVE_SECONDS` keeps proxies from closing a quiet stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route

from agentledger.client.run_client import RunClient
from agentledger.core.errors import InvalidRequest
from agentledger.core.results import WatchItem
from agentledger.http.auth import caller, door_of, runs_for

KEEPALIVE_SECONDS = 15.0


def last_seen(request: Request) -> int | None:
    """The sequence number the client saw last (`Last-Event-ID`, or `?after=`)."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise InvalidRequest(f"Last-Event-ID takes an event's sequence number, not {raw!r}")
    return int(raw)


def sse(item: WatchItem) -> ServerSentEvent:
    data = item.model_dump(mode="json", exclude_none=True)
    if item.kind == "event":
        return ServerSentEvent(json.dumps(data), event="event", id=str(item.seq))
    return ServerSentEvent(json.dumps(data), event=item.kind)


async def after(items: AsyncIterator[WatchItem], seen: int | None) -> AsyncIterator[WatchItem]:
    """The items past event `seen`: events with a greater sequence number, and text that
    came after the last event passed over."""
    passed = seen is None
    async for item in items:
        if item.kind == "event" and item.seq is not None and seen is not None:
            if item.seq <= seen:
                passed = passed or item.seq == seen
                continue
            passed = True
        if passed or item.kind == "receipt":
            yield item


async def stream(
    client: RunClient, run_id: str, seen: int | None
) -> AsyncIterator[ServerSentEvent]:
    async for item in after(client.runs.watch(run_id), seen):
        yield sse(item)


async def events(request: Request) -> EventSourceResponse:
    who = await caller(request, need="viewer")
    seen = last_seen(request)
    client = runs_for(request, who)
    run_id = str(request.path_params["run_id"])
    # Refused before the stream opens (404 for a run not the tenant's), not inside it: the
    # lightest read that goes through the tenant's check and needs no worker.
    await client.runs.version(run_id)
    slots = door_of(request).streams
    slots.take(who.credential)

    async def held_stream() -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in stream(client, run_id, seen):
                yield event
        finally:
            slots.give_back(who.credential)

    return EventSourceResponse(held_stream(), ping=KEEPALIVE_SECONDS)


def routes() -> list[Route]:
    return [Route("/v1/runs/{run_id}/events", events, methods=["GET"])]
