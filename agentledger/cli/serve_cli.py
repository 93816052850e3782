"""`agentledger serve` (the HTTP door, agentledger.http) and `agentledger keys create|list|revoke`
(its API keys: an operator's act)."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, count, emit, say

if TYPE_CHECKING:
    from agentledger import RunClient
    from agentledger.core.config import AgentLedgerConfig
    from agentledger.core.http_config import HttpConfig

KEY_COLUMNS = [
    "key_id",
    "name",
    "tenant",
    "role",
    "approval_roles",
    "created_at",
    "expires_at",
    "revoked_at",
]


def add_commands(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API (REST, event streams) until interrupted")
    add_output_flags(p)
    p.add_argument("--host", help="address to listen on (default AGENTLEDGER_HTTP_HOST, 127.0.0.1)")
    p.add_argument(
        "--port", type=int, help="port (default AGENTLEDGER_HTTP_PORT, 8321; 0: any free)"
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        help="an origin browsers may call from (CORS); repeat for more",
    )
    p.add_argument("--body-limit", type=count, help="largest request body, bytes")
    p.add_argument(
        "--proxy-headers",
        action="store_true",
        default=None,
        help="believe X-Forwarded-For/-Proto from the trusted proxies (behind a proxy you run)",
    )
    p.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        help="a proxy's address or network (10.0.0.0/8) whose X-Forwarded-For is believed; "
        "repeat for more (default AGENTLEDGER_HTTP_TRUSTED_PROXIES, loopback)",
    )
    group = sub.add_parser("keys", help="API keys for `agentledger serve` (an operator's act)")
    commands = group.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    p = commands.add_parser("create", help="a key for a tenant's people; printed once")
    p.add_argument("--tenant", required=True, help="the tenant the key acts for")
    p.add_argument(
        "--role",
        required=True,
        choices=["viewer", "runner", "approver", "admin"],
        help="what the key's holder may do: viewer reads; runner also starts and steers runs; "
        "approver reads and decides approvals; admin all of these and reads the tenant's "
        "settings (docs/http.md)",
    )
    p.add_argument("--expires", help="expires after this long (30d, 12h); default never")
    p.add_argument("--name", help="a label for people, shown by `keys list` (who holds it)")
    p.add_argument(
        "--decides",
        help="approval roles an approver or admin key decides in beside its role, such as "
        "finance,legal (the roles a spec's or the tenant's rules ask for)",
    )
    add_output_flags(p)
    p = commands.add_parser("list", help="every key: tenant, role, expiry, revocation")
    add_output_flags(p)
    p = commands.add_parser("revoke", help="revoke a key at once")
    p.add_argument("key_id", help="the key's id, as `keys list` shows it")
    add_output_flags(p)


async def cmd_serve(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.http.server import serve

    flags = {
        "host": args.host,
        "port": args.port,
        "allow_origins": ",".join(args.allow_origin) or None,
        "body_limit_bytes": args.body_limit,
        "proxy_headers": args.proxy_headers,
        "trusted_proxies": ",".join(args.trusted_proxy) or None,
    }
    settings = client.config.http.with_flags({k: v for k, v in flags.items() if v is not None})
    await client.keys.listed()  # the database answers, at this schema, for an operator

    def ready(url: str) -> None:
        emit({"url": url}, getattr(args, "json", False), f"serving on {url} (docs: {url}/docs)")

    await serve(client, settings, ready=ready)
    return 0


async def cmd_keys(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    if args.keys_command == "create":
        from agentledger.core.errors import InvalidRequest
        from agentledger.core.periods import parse_age

        try:
            expires = parse_age(args.expires) if args.expires else None
        except ValueError as err:
            raise InvalidRequest(f"--expires: {err}") from err
        decides = [r.strip() for r in (args.decides or "").split(",") if r.strip()]
        made = await client.keys.create(
            args.tenant, args.role, expires_in=expires, name=args.name, approval_roles=decides
        )
        named = f" ({made.name})" if made.name else ""
        also = f", deciding as {', '.join(made.approval_roles)} too" if made.approval_roles else ""
        emit(
            made.model_dump(mode="json"),
            args.json,
            f"{made.key}\n(key {made.key_id}{named} for tenant {made.tenant}, role "
            f"{made.role}{also}; shown this once: only its hash is kept)",
        )
    elif args.keys_command == "list":
        rows = [row.model_dump(mode="json") for row in await client.keys.listed()]
        emit(rows, args.json, render.table(rows, KEY_COLUMNS) if rows else "no API key")
    else:
        row = await client.keys.revoke(args.key_id)
        emit(
            row.model_dump(mode="json"),
            args.json,
            f"key {row.key_id} revoked at {render.local_time(row.revoked_at)}",
        )
    return 0


class DoorBeside:
    """The HTTP door `agentledger up` serves beside its stack, on a socket bound before the
    stack's endpoints are printed."""

    def __init__(self, sock: Any, url: str) -> None:
        self.sock = sock
        self.url = url

    def start(self, settings: AgentLedgerConfig, stop: asyncio.Event) -> asyncio.Task[None]:
        return asyncio.create_task(self._serve(settings, stop))

    async def _serve(self, settings: AgentLedgerConfig, stop: asyncio.Event) -> None:
        from agentledger import RunClient
        from agentledger.http.server import serve

        async with RunClient.lazy(settings) as client:
            await serve(client, settings.http, ready=lambda url: None, sock=self.sock, stop=stop)


def door_beside(args: argparse.Namespace, http: HttpConfig) -> DoorBeside | None:
    """A socket for `up`'s HTTP door: AGENTLEDGER_HTTP_PORT, or a free port if another program
    holds it (said); None, said, without the `serve` extra."""
    from agentledger.core.errors import SetupError
    from agentledger.core.extras import install_command

    try:
        from agentledger.http.server import bind, url_of
    except ImportError:
        say(args, f"no HTTP door: `{install_command('serve')}` adds it")
        return None
    try:
        sock = bind(http.host, http.port)
    except SetupError:
        sock = bind(http.host, 0)
        say(args, f"port {http.port} is in use; the HTTP door takes a free one")
    return DoorBeside(sock, url_of(sock))
