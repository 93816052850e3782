"""A loopback HTTP server in a daemon thread: the offline model and the codec server use it."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Self


class BackgroundHTTPServer:
    """Owns a ThreadingHTTPServer: start it in a thread, or serve it in the foreground."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        # Polled for shutdown every 50 ms (the default 0.5 s would be most of a stop's time).
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
