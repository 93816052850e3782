"""A Temporal codec server: lets the Web UI show encrypted payloads decoded to an operator
who runs it with the keys (AGENTLEDGER_ENCRYPTION_KEYS), or with the codec of a user's own app
(AGENTLEDGER_CODEC, which then `agentledger` commands elsewhere reach through
AGENTLEDGER_CODEC_ENDPOINT). The keys never leave this process; the browser sends payloads here
and gets them back decoded.

    python -m agentledger.temporal.codec_server --port 8081 [--web-ui URL of the Temporal Web UI]

Then point the Web UI at http://localhost:8081 (its "Data Encoder" setting, or
`temporal server start-dev --ui-codec-endpoint http://localhost:8081`). The protocol is
Temporal's: POST /encode and POST /decode with `{"payloads": [...]}` in the protobuf JSON
form (metadata values and data base64), answered in the same shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.converter import PayloadCodec

from agentledger.core.background_http import BackgroundHTTPServer
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEFAULT_WEB_UI
from agentledger.core.errors import SetupError
from agentledger.core.log_setup import configure_logging
from agentledger.temporal.encryption import EncryptionCodec, codec_for
from agentledger.temporal.user_codec import load_codec

log = logging.getLogger(__name__)

DEFAULT_WEB_UI_ORIGIN = DEFAULT_WEB_UI
ALLOWED_HEADERS = "content-type, x-namespace, authorization"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_OPTIONS(self) -> None:
        # The browser's CORS preflight before each POST from the Web UI's origin.
        self._send(204, b"")

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0].rstrip("/")
        if route.endswith("/encode"):
            transform = self.server.codec.encode
        elif route.endswith("/decode"):
            transform = self.server.codec.decode
        else:
            self._send_json(404, {"error": f"no route {self.path}: use /encode or /decode"})
            return
        try:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            payloads = json_format.Parse(body, Payloads())
        except (json_format.ParseError, ValueError) as err:
            self._send_json(400, {"error": f"expected {{'payloads': [...]}}: {err}"})
            return
        try:  # a codec's methods are coroutines; each request has a thread of its own
            result = Payloads(payloads=asyncio.run(transform(list(payloads.payloads))))
        except Exception as err:  # a key it lacks, a payload altered: the caller's to hear
            self._send_json(400, {"error": str(err) or type(err).__name__})
            return
        self._send(200, json_format.MessageToJson(result).encode())

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("access-control-allow-origin", self.server.web_ui_origin)
        self.send_header("access-control-allow-methods", "POST, OPTIONS")
        self.send_header("access-control-allow-headers", ALLOWED_HEADERS)
        self.send_header("access-control-allow-credentials", "true")
        self.send_header("vary", "origin")
        if body:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    codec: PayloadCodec
    web_ui_origin: str


class CodecServer(BackgroundHTTPServer):
    """Serves a codec over HTTP in a background thread (`serve_forever` in the foreground)."""

    def __init__(
        self,
        codec: PayloadCodec,
        *,
        host: str = "127.0.0.1",
        port: int = 8081,
        web_ui_origin: str = DEFAULT_WEB_UI_ORIGIN,
    ) -> None:
        server = _Server((host, port), _Handler)
        server.codec = codec
        server.web_ui_origin = web_ui_origin.rstrip("/")
        super().__init__(server)

    @property
    def url(self) -> str:
        return self.origin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--web-ui", default=DEFAULT_WEB_UI_ORIGIN, help="the Web UI's origin, allowed by CORS"
    )
    args = parser.parse_args()
    try:
        settings = AgentLedgerConfig.load()
        configure_logging(settings.log_level, settings.log_format)
        codec = load_codec(settings.codec) if settings.codec else codec_for(settings)
        if codec is None:
            raise SetupError(
                "neither AGENTLEDGER_ENCRYPTION_KEYS nor AGENTLEDGER_CODEC is set: the codec "
                "server needs the keys the workers encrypt with, or your app's codec"
            )
    except SetupError as err:
        # A config that does not load leaves no log format to speak in: one plain line.
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
    server = CodecServer(codec, host=args.host, port=args.port, web_ui_origin=args.web_ui)
    log.info(
        "codec server at %s (%s) for the Web UI at %s; set it as the UI's codec endpoint",
        server.url,
        f"key {codec.active_key_id!r} encodes"
        if isinstance(codec, EncryptionCodec)
        else settings.codec,
        args.web_ui,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
