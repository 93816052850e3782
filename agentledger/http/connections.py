"""Connections before they are requests: how many the door holds open, per client address
and in all, and how long a client may take to send a request's headers.

A client that opens connections and never finishes a request would otherwise hold them
for as long as it likes, until the process runs out of file descriptors and answers no
one (`/healthz` included), while asyncio logs a traceback for every accept it cannot
make. So each connection is counted as it is accepted: past a limit it is answered at
once (429 for its address, 503 for the door) and closed, holding nothing; a connection
whose request headers are not all in within the header timeout is answered 408 and
closed; the limit in all is kept below the descriptors the process may open. Refusals
are logged once a minute per kind, with how many there were, never once per connection.

uvicorn's HTTP/1.1 protocol (h11) does the HTTP; this subclass only counts and times.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from agentledger.core.http_config import HttpConfig, Network
from agentledger.http.errors import error_body

log = logging.getLogger("agentledger.http")

# Descriptors kept for what is not a client's connection: the database pool, Temporal's
# client, the JWKS fetch, log files.
RESERVED_DESCRIPTORS = 128
# asyncio's own message when accept() fails for want of descriptors.
ACCEPT_EXHAUSTED = "socket.accept() out of system resource"


class RefusalLog:
    """One line per kind of refusal per `interval` seconds, saying how many there were."""

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._said: dict[str, float] = {}
        self._since: Counter[str] = Counter()

    def note(self, kind: str, message: str) -> None:
        now = time.monotonic()
        self._since[kind] += 1
        said = self._said.get(kind)
        if said is not None and now - said < self.interval:
            return
        count = self._since.pop(kind)
        self._said[kind] = now
        more = f" ({count} such refusals since this was last said)" if count > 1 else ""
        log.warning("%s%s; said at most once a minute", message, more)


def raw_answer(status: int, kind: str, message: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, written before (or instead of)
    reading a request."""
    body = json.dumps(error_body(kind, message)).encode()
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if retry_after is not None:
        lines.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass(frozen=True)
class Refusal:
    status: int
    kind: str
    message: str


class ConnectionCounts:
    """The connections open now, per client address and in all."""

    def __init__(self, settings: HttpConfig, total: int, refusals: RefusalLog) -> None:
        self.total_limit = total
        self.address_limit = settings.connections_per_address
        self.proxies: list[Network] = settings.proxies()
        self.refusals = refusals
        self.total = 0
        self.per_address: Counter[str] = Counter()

    def proxy(self, address: str) -> bool:
        """A trusted proxy's connections carry many clients: no per-address limit."""
        if not self.proxies:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.proxies)

    def admit(self, address: str) -> Refusal | None:
        """Count a new connection from `address`, or say why it is refused (not counted)."""
        if self.total >= self.total_limit:
            self.refusals.note(
                "connections",
                f"refused connections: {self.total_limit} are open (AGENTLEDGER_HTTP_CONNECTIONS)",
            )
            return Refusal(
                503, "too_many_connections", "the server holds all the connections it may; retry"
            )
        if self.per_address[address] >= self.address_limit and not self.proxy(address):
            self.refusals.note(
                "connections_per_address",
                f"refused connections from {address}: {self.address_limit} are open from it "
                "(AGENTLEDGER_HTTP_CONNECTIONS_PER_ADDRESS)",
            )
            return Refusal(
                429,
                "too_many_connections",
                f"{self.address_limit} connections are open from your address; close some, "
                "then retry",
            )
        self.total += 1
        self.per_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self.per_address[address] -= 1
        if not self.per_address[address]:
            del self.per_address[address]


def guarded_protocol(counts: ConnectionCounts, header_seconds: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, counting connections against `counts` and closing one
    whose request headers take longer than `header_seconds` (from its opening, or from the
    end of its previous answer)."""

    class Guarded(H11Protocol):
        address = ""
        admitted = False
        headers_due: asyncio.TimerHandle | None = None
        awaited_after: Any = None  # the request cycle the next request's headers follow

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.address = self.client[0] if self.client else ""
            refusal = counts.admit(self.address)
            if refusal is not None:
                transport.write(raw_answer(refusal.status, refusal.kind, refusal.message, 1))
                transport.close()
                return
            self.admitted = True
            self.await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self.headers_in()
            if self.admitted:
                self.admitted = False
                counts.release(self.address)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not self.awaited_after:
                self.headers_in()

        def on_response_complete(self) -> None:
            answered = self.cycle
            super().on_response_complete()
            if not self.transport.is_closing() and self.cycle is answered:
                self.await_headers()

        def await_headers(self) -> None:
            self.headers_in()
            self.awaited_after = self.cycle
            self.headers_due = self.loop.call_later(header_seconds, self.headers_late)

        def headers_in(self) -> None:
            if self.headers_due is not None:
                self.headers_due.cancel()
                self.headers_due = None

        def headers_late(self) -> None:
            self.headers_due = None
            if self.transport.is_closing():
                return
            counts.refusals.note(
                "header_timeout",
                f"closed connections whose request headers took over {header_seconds:g} s "
                "(AGENTLEDGER_HTTP_HEADER_TIMEOUT_SECONDS)",
            )
            message = f"the request's headers did not arrive within {header_seconds:g} s"
            self.transport.write(raw_answer(408, "timeout", message))
            self.transport.close()

    return Guarded


def connections_that_fit(wanted: int) -> int:
    """`wanted`, or fewer if the process may not open that many descriptors beside the
    ones it keeps for itself (the soft limit is raised toward the hard one first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVED_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    fits = max(1, soft - RESERVED_DESCRIPTORS)
    log.warning(
        "AGENTLEDGER_HTTP_CONNECTIONS is %d, but this process may open %d files "
        "(ulimit -n): the door holds at most %d connections",
        wanted,
        soft,
        fits,
    )
    return fits


def quiet_accept_failures(
    loop: asyncio.AbstractEventLoop, refusals: RefusalLog
) -> Callable[[], None]:
    """Say a failed accept (no descriptor left) once a minute, not once a second with a
    traceback; returns how to put the loop's handler back."""
    before = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith(ACCEPT_EXHAUSTED):
            refusals.note(
                "descriptors",
                f"could not accept connections: {context.get('exception')}; lower "
                "AGENTLEDGER_HTTP_CONNECTIONS or raise `ulimit -n`",
            )
        elif before is not None:
            before(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(before)
