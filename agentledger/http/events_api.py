"""GET /v1/runs/{run_id}/events: the run as Server-Sent Events, resumable.

Every event carries an `id:`. A run event's is its sequence number in the run (the
mirror's `events.seq`); what the mirror does not number (model text as `event: text`, a
step's retry as a `step.retry` event, the receipt) takes the last event's number and its
place after it (`12.3`: the third item after event 12). The stream ends with `event:
receipt`. A client that comes back with `Last-Event-ID` (a browser's EventSource does by
itself) gets everything after that id once, in order, whether it lost the connection or
the server restarted: the stream is read again from the run's start and everything up to
the id is passed over, so the server keeps nothing per client. An ended run's story comes
from the mirror, which holds its events (not its text or retries), so their ids are the
same. The receipt is always sent, so a client that comes back after the end hears it.

A stream whose credential ends (a key revoked) ends within a second with `event: error`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic import Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route

from agentledger.core.errors import InvalidRequest
from agentledger.core.results import WatchItem
from agentledger.http import event_streams
from agentledger.http.auth import door_of
from agentledger.http.bodies import Body
from agentledger.http.endpoints import Call, Endpoint, routes_of
from agentledger.http.errors import error_body

_EVENT_ID = re.compile(r"(0|[1-9][0-9]{0,17})(?:\.([1-9][0-9]{0,8}))?")


@dataclass(frozen=True, order=True)
class Position:
    """Where an item stands in a run's stream: after event `seq`, the `extra`th item the
    mirror does not number (0: the event itself)."""

    seq: int
    extra: int = 0

    def __str__(self) -> str:
        return f"{self.seq}.{self.extra}" if self.extra else str(self.seq)


class EventsQuery(Body):
    """Where to start."""

    after: str | None = Field(
        None,
        description="the id of the last event you have, for clients that cannot send "
        "Last-Event-ID (the header wins)",
    )


def last_seen(request: Request) -> Position | None:
    """The id the client saw last (`Last-Event-ID`, or `?after=`), or 400 saying what to send."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        raw = request.query_params.get("after")
    if raw is None or raw == "":
        return None
    match = _EVENT_ID.fullmatch(raw)
    if match is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise InvalidRequest(
            f"Last-Event-ID takes the id of an event this stream sent (such as 12 or 12.3), "
            f"or nothing to start from the run's first event; not {shown!r}"
        )
    return Position(int(match.group(1)), int(match.group(2) or 0))


async def positioned(
    items: AsyncIterator[WatchItem], seen: Position | None = None
) -> AsyncIterator[tuple[Position, WatchItem]]:
    """Each item with its place in the stream, those up to `seen` passed over (the receipt
    is never passed over: a client that comes back after the end hears how it ended)."""
    seq = extra = 0
    try:
        async for item in items:
            if item.kind == "event" and item.seq is not None:
                seq, extra = item.seq, 0
            else:
                extra += 1
            position = Position(seq, extra)
            if seen is None or position > seen or item.kind == "receipt":
                yield position, item
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()


async def after(items: AsyncIterator[WatchItem], seen: Position | None) -> AsyncIterator[WatchItem]:
    """The items past `seen`, as a stream resumed from it tells them."""
    async for _, item in positioned(items, seen):
        yield item


def sse(position: Position, item: WatchItem) -> ServerSentEvent:
    data = json.dumps(item.model_dump(mode="json", exclude_none=True))
    return event_streams.event(data, kind=item.kind, event_id=str(position))


async def events(call: Call[EventsQuery]) -> EventSourceResponse:
    """The run's events as Server-Sent Events, live, to its receipt.

    Each event has an `id:`; send the last one you have as `Last-Event-ID` (or `?after=`)
    to get everything after it once."""
    seen = last_seen(call.request)
    client = call.runs
    run_id = call.path("run_id")
    # Refused before the stream opens (404 for a run not the tenant's), not inside it: the
    # lightest read that goes through the tenant's check and needs no worker.
    await client.runs.version(run_id)
    streams = door_of(call.request).streams
    stream = streams.take(call.who)

    async def sent() -> AsyncIterator[ServerSentEvent]:
        told = positioned(client.runs.watch(run_id), seen)
        async for position, item in streams.follow(stream, told):
            yield sse(position, item)
        if stream.ended:
            ended = error_body("unauthenticated", f"{stream.why}; the stream ends")
            yield event_streams.event(json.dumps(ended), kind="error")

    return event_streams.response(sent(), streams, stream)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v1/runs/{run_id}/events",
        events,
        "viewer",
        query=EventsQuery,
        answer=WatchItem,
        events="`event: event` (a run event), `event: text` (model text), finally "
        "`event: receipt`; each `data:` one WatchItem as JSON, each with an `id:`",
        headers={"Last-Event-ID": "the id of the last event you have: the stream resumes after it"},
    )
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
