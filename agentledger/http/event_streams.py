"""Server-Sent Events as the door writes them, on every stream route: events separated by
a blank line of LF alone (`data: ...\\n\\n`), as AG-UI's encoder writes them and its
official client splits them (it reads no CRLF); a comment line every `KEEPALIVE_SECONDS`
keeps proxies from closing a quiet stream; the credential's stream slot is given back
however the stream ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from agentledger.http.streams import OpenStream, Streams

SEPARATOR = "\n"
KEEPALIVE_SECONDS = 15.0


def event(data: str, *, kind: str | None = None, event_id: str | None = None) -> ServerSentEvent:
    return ServerSentEvent(data, event=kind, id=event_id, sep=SEPARATOR)


def response(
    events: AsyncIterator[ServerSentEvent | bytes], streams: Streams, stream: OpenStream
) -> EventSourceResponse:
    return EventSourceResponse(
        events,
        ping=KEEPALIVE_SECONDS,
        sep=SEPARATOR,
        # A stream the client left before it began never runs its own cleanup.
        background=BackgroundTask(streams.give_back, stream),
    )
