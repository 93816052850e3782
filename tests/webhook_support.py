"""A webhook receiver in the test process: real HTTP on loopback, every delivery kept with
its headers and raw body, and (`failures`) a number of first attempts answered 500 (or
`failure_code`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from agentledger.core.background_http import BackgroundHTTPServer


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    at: float
    answered: int


class Receiver:
    def __init__(
        self,
        *,
        failures: int = 0,
        failure_code: int = 500,
        hangs: int = 0,
        hang_seconds: float = 30,
    ) -> None:
        self.deliveries: list[Delivery] = []
        self.failures, self.failure_code = failures, failure_code
        # The first `hangs` requests are held this long before their 500: a sender killed
        # meanwhile never hears back.
        self.hangs, self.hang_seconds = hangs, hang_seconds
        self.arrived: list[float] = []
        lock = threading.Lock()
        outer = self

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    outer.arrived.append(time.time())
                    hang = outer.hangs > 0
                    outer.hangs -= 1
                if hang:
                    time.sleep(outer.hang_seconds)
                    with contextlib.suppress(OSError):
                        self.send_response(500)
                        self.end_headers()
                    return
                with lock:
                    code = outer.failure_code if outer.failures > 0 else 200
                    outer.failures -= 1
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.deliveries.append(Delivery(headers, body, time.time(), code))
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = BackgroundHTTPServer(ThreadingHTTPServer(("127.0.0.1", 0), Hook))

    @property
    def url(self) -> str:
        return f"{self.server.origin}/hook"

    def accepted(self) -> list[Delivery]:
        return [d for d in self.deliveries if d.answered == 200]

    async def wait_for(self, count: int, seconds: float = 30.0) -> list[Delivery]:
        """The first `count` accepted deliveries, waited for."""
        deadline = time.monotonic() + seconds
        while len(self.accepted()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.accepted())} deliveries of {count} came")
            await asyncio.sleep(0.1)
        return self.accepted()

    def __enter__(self) -> Self:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
