"""`agentrun tenants set|list`: each tenant's share of the workers and its limits."""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentrun.cli import render
from agentrun.core.settings import Settings
from agentrun.ops import tenant_ops
from agentrun.store.db import open_pool
from agentrun.temporal.client import connect

OFF = "off"
COLUMNS = [
    "tenant",
    "weight",
    "max_in_flight",
    "max_queued",
    "model_calls_per_second",
    "in_flight",
    "queued",
]


def limit(kind: type) -> Any:
    """A number, or `off` to remove the limit."""

    def parse(text: str) -> Any:
        if text.strip().lower() == OFF:
            return None
        try:
            return kind(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"expected a number or {OFF!r}, got {text!r}") from err

    return parse


def add_commands(sub: Any) -> None:
    group = sub.add_parser("tenants", help="tenants' weights, caps and model-call rates")
    commands = group.add_subparsers(dest="tenants_command", required=True)
    p = commands.add_parser(
        "set",
        help="change a tenant's settings (the others stay)",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("tenant")
    p.add_argument("--weight", type=float, help="share of the workers against others (1)")
    p.add_argument(
        "--max-in-flight", type=limit(int), help="runs past `queued` at once, or off (off)"
    )
    p.add_argument(
        "--max-queued",
        type=limit(int),
        help="runs waiting for a slot; a start past it is refused with exit 2; or off (off)",
    )
    p.add_argument(
        "--model-calls-per-second", type=limit(float), help="model calls per second, or off"
    )
    p.add_argument("--json", action="store_true", default=False, help="print JSON for machines")
    p = commands.add_parser("list", help="every tenant: settings, runs in flight and queued")
    p.add_argument("--json", action="store_true", help="print JSON for machines")


async def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    pool = await open_pool(
        settings.require_database(),
        max_size=2,
        connect_seconds=5,
        prepared_statements=settings.prepared_statements,
    )
    try:
        if args.tenants_command == "list":
            rows = await tenant_ops.list_tenants(pool)
            text = render.table(rows, COLUMNS) if rows else "no tenant is configured"
            print(json.dumps(rows, indent=2, default=str) if args.json else text)
            return 0
        changes = {
            name: getattr(args, name)
            for name in ("weight", "max_in_flight", "max_queued", "model_calls_per_second")
            if hasattr(args, name)  # flags left out are absent (SUPPRESS): they stay
        }
        client = await connect(settings)
        limits = await tenant_ops.set_tenant(
            client, pool, args.tenant, changes, task_queue=settings.task_queue
        )
    finally:
        await pool.close()
    data = limits.model_dump()
    text = ", ".join(f"{k}={'off' if v is None else v}" for k, v in data.items())
    print(json.dumps(data, indent=2) if args.json else text)
    return 0
