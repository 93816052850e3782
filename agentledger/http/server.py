"""Running the door: uvicorn on a socket bound here, so a busy port is said plainly and
port 0 takes a free one whose URL is printed before the first request. Connections are
counted and timed as they come (agentledger.http.connections); proxy headers are read
from the trusted proxies alone."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from agentledger.client.run_client import RunClient
from agentledger.core.errors import SetupError
from agentledger.core.http_config import HttpConfig
from agentledger.http.app import create_app
from agentledger.http.connections import (
    ConnectionCounts,
    RefusalLog,
    connections_that_fit,
    guarded_protocol,
    quiet_accept_failures,
)

# Connections the kernel queues for accept: past the door's own limits it accepts and
# refuses them at once, so this only smooths bursts.
BACKLOG = 1024


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise SetupError(
            f"cannot listen on {host}:{port} ({err.strerror}); pick another with --port "
            "(0: any free port)"
        ) from err
    sock.listen(BACKLOG)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Beside(uvicorn.Server):
    """A server inside another command (`up`), which owns the process's signals."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class PerConnectionWarnings(logging.Filter):
    """uvicorn warns once per connection (a malformed request, an unsupported upgrade):
    those go to the refusal log, said once a minute per kind."""

    def __init__(self, refusals: RefusalLog) -> None:
        super().__init__()
        self.refusals = refusals

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        self.refusals.note(f"uvicorn:{record.msg}", f"uvicorn: {record.getMessage()}")
        return False


async def serve(
    runs: RunClient,
    settings: HttpConfig,
    *,
    ready: Callable[[str], None] = print,
    sock: socket.socket | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve on `sock` (else on the settings' host and port) until interrupted (SIGINT,
    SIGTERM), or, with `stop`, until it is set; `ready` hears the URL once bound."""
    app = create_app(runs, settings)
    sock = sock or bind(settings.host, settings.port)
    refusals = RefusalLog()
    counts = ConnectionCounts(settings, connections_that_fit(settings.connections), refusals)
    config = uvicorn.Config(
        app,
        http=guarded_protocol(counts, settings.header_timeout_seconds),
        ws="none",
        proxy_headers=settings.proxy_headers,
        forwarded_allow_ips=[str(network) for network in settings.proxies()],
        log_level="warning",
        lifespan="on",  # MCP's sessions live in a task group the app's lifespan holds
        timeout_graceful_shutdown=5,
        backlog=BACKLOG,
    )
    warnings = PerConnectionWarnings(refusals)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(warnings)
    restore = quiet_accept_failures(asyncio.get_running_loop(), refusals)
    ready(url_of(sock))
    try:
        if stop is None:
            await uvicorn.Server(config).serve(sockets=[sock])
            return
        server = _Beside(config)
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        await asyncio.wait(
            [serving, asyncio.create_task(stop.wait())], return_when="FIRST_COMPLETED"
        )
        server.should_exit = True
        await serving
    finally:
        restore()
        uvicorn_log.removeFilter(warnings)
