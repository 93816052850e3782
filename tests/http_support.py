"""The HTTP door as users run it: `agentledger serve --port 0` in a subprocess on the test's
settings, and keys made the operator's way."""

from __future__ import annotations

import asyncio
import json
import resource
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from agentledger import RunClient
from agentledger.core.background_http import BackgroundHTTPServer
from agentledger.core.config import AgentLedgerConfig
from tests.test_cli import ROOT, cli_env

START_SECONDS = 60.0
# An agent whose runs are sessions (AGENTLEDGER_AGENTS=a file of this): each message a turn.
SESSION_PROFILE = """
concierge:
  instructions: You answer our customers' questions, turn by turn.
  tools: []
  session:
    idle_timeout: 600
"""


@dataclass
class Served:
    url: str
    process: asyncio.subprocess.Process
    stderr: bytearray

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to close anything."""
        self.process.send_signal(signal.SIGKILL)

    def log(self) -> str:
        """What the server wrote to stderr so far (its log)."""
        return self.stderr.decode(errors="replace")


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    """Keep reading the server's log, so a full pipe never stops it."""
    while chunk := await stream.read(65536):
        into += chunk


@asynccontextmanager
async def served(
    settings: AgentLedgerConfig,
    home: Path,
    *args: str,
    env: dict[str, str] | None = None,
    open_files: int | None = None,
) -> AsyncIterator[Served]:
    """`agentledger serve --port 0 ARGS` until the block ends; its URL from its first line.
    With `open_files`, the server may open no more files than that (soft and hard limit,
    as `ulimit -n` sets on many machines)."""
    command = [str(Path(sys.executable).parent / "agentledger"), "serve", "--port", "0", *args]

    def limited() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env={**cli_env(settings, home), **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=limited,
    )
    log = bytearray()
    assert proc.stderr is not None
    draining = asyncio.create_task(_drain(proc.stderr, log))
    try:
        assert proc.stdout is not None
        try:
            first = await asyncio.wait_for(proc.stdout.readline(), START_SECONDS)
        except TimeoutError:
            first = b""
        line = first.decode()
        if not line.startswith("serving on "):
            proc.kill()
            await proc.wait()
            await draining
            raise AssertionError(f"`agentledger serve` did not start: {line!r} {log.decode()}")
        yield Served(line.split()[2], proc, log)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        try:
            await asyncio.wait_for(draining, 5)  # the log's end, once the server has exited
        except TimeoutError:
            pass


async def make_key(settings: AgentLedgerConfig, tenant: str, role: str, **kwargs: object) -> str:
    """A new key, made as `agentledger keys create` makes it."""
    async with RunClient.lazy(settings.model_copy(update={"tenant": None})) as operator:
        made = await operator.keys.create(tenant, role, **kwargs)  # type: ignore[arg-type]
    return made.key


def doc_block(language: str, holding: str) -> str:
    """The block of `language` in docs/protocols.md that holds `holding`, as written."""
    page = (ROOT / "docs" / "protocols.md").read_text()
    blocks = page.split(f"```{language}\n")[1:]
    [block] = [b.split("```")[0] for b in blocks if holding in b]
    return block


def tenant_name() -> str:
    """A fresh tenant, so a test's runs and keys meet no other test's."""
    return f"t{uuid.uuid4().hex[:8]}"


def identity(key: str) -> str:
    """Who a key's decisions are recorded as: `key:<its id>` (`ark_<id>_<secret>`)."""
    return "key:" + key.split("_")[1]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Sse:
    event: str
    data: str
    id: str | None


async def sse_events(response: httpx.Response) -> AsyncIterator[Sse]:
    """A text/event-stream's events as they come (comments, the keep-alives, skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if not line:
            if "data" in fields:
                yield Sse(fields.get("event", "message"), fields["data"], fields.get("id"))
            fields = {}
            continue
        name, _, value = line.partition(":")
        fields[name] = value.removeprefix(" ")


class Issuer:
    """An OIDC issuer in the test process: an RSA key made here, its JWKS served over real
    HTTP on loopback, and tokens signed with it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = f"kid-{uuid.uuid4().hex[:8]}"
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]})

        class Jwks(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = BackgroundHTTPServer(ThreadingHTTPServer(("127.0.0.1", 0), Jwks))

    @property
    def jwks_url(self) -> str:
        return f"{self.server.origin}/jwks.json"

    def token(self, sub: str, tenant: str, roles: list[str], **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": self.name,
            "aud": "agentledger",
            "sub": sub,
            "tenant": tenant,
            "roles": roles,
            "iat": now,
            "exp": now + 600,
            **claims,
        }
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def settings(self) -> dict[str, str]:
        """The environment `agentledger serve` trusts this issuer by."""
        return {
            "AGENTLEDGER_OIDC_JWKS_URL": self.jwks_url,
            "AGENTLEDGER_OIDC_ISSUER": self.name,
            "AGENTLEDGER_OIDC_AUDIENCE": "agentledger",
        }
