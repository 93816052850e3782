"""Running the door: uvicorn on a socket bound here, so a busy port is said plainly and
port 0 takes a free one whose URL is printed before the first request."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from agentledger.client.run_client import RunClient
from agentledger.core.errors import SetupError
from agentledger.core.http_settings import HttpSettings
from agentledger.http.app import create_app


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
    sock.listen(128)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Beside(uvicorn.Server):
    """A server inside another command (`up`), which owns the process's signals."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    runs: RunClient,
    settings: HttpSettings,
    *,
    ready: Callable[[str], None] = print,
    sock: socket.socket | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve on `sock` (else on the settings' host and port) until interrupted (SIGINT,
    SIGTERM), or, with `stop`, until it is set; `ready` hears the URL once bound."""
    app = create_app(runs, settings)
    sock = sock or bind(settings.host, settings.port)
    config = uvicorn.Config(
        app,
        proxy_headers=settings.proxy_headers,
        forwarded_allow_ips="*" if settings.proxy_headers else "",
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    ready(url_of(sock))
    if stop is None:
        await uvicorn.Server(config).serve(sockets=[sock])
        return
    server = _Beside(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await asyncio.wait([serving, asyncio.create_task(stop.wait())], return_when="FIRST_COMPLETED")
    server.should_exit = True
    await serving
