"""`agentledger tenants set|list`: each tenant's share of the workers and its limits."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, emit

if TYPE_CHECKING:
    from agentledger import RunClient

OFF = "off"
COLUMNS = [
    "tenant",
    "weight",
    "max_in_flight",
    "max_queued",
    "model_calls_per_second",
    "allowed_priorities",
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


def priorities(text: str) -> list[int] | None:
    """`1,2,3`: the priorities a tenant's runs may take; `off`: any."""
    if text.strip().lower() == OFF:
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected priorities such as 1,2,3 or {OFF!r}, got {text!r}"
        ) from err


SETTINGS = ("weight", "max_in_flight", "max_queued", "model_calls_per_second", "allowed_priorities")


def add_commands(sub: Any) -> None:
    group = sub.add_parser(
        "tenants", help="tenants' weights, caps, model-call rates and priorities"
    )
    commands = group.add_subparsers(dest="tenants_command", required=True, metavar="COMMAND")
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
        help="runs waiting for a slot; a start past it is refused (exit 5); or off (off)",
    )
    p.add_argument(
        "--model-calls-per-second", type=limit(float), help="model calls per second, or off"
    )
    p.add_argument(
        "--priorities",
        dest="allowed_priorities",
        type=priorities,
        help="the priorities its runs may take, such as 2,3,4,5; a start at another is "
        "refused (exit 5); or off (any)",
    )
    add_output_flags(p)
    p = commands.add_parser("list", help="every tenant: settings, runs in flight and queued")
    add_output_flags(p)


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    if args.tenants_command == "list":
        rows = [row.model_dump() for row in await client.tenants.listed()]
        emit(rows, args.json, render.table(rows, COLUMNS) if rows else "no tenant is configured")
        return 0
    changes = {
        name: getattr(args, name)
        for name in SETTINGS
        if hasattr(args, name)  # flags left out are absent (SUPPRESS): they stay
    }
    limits = await client.tenants.set(args.tenant, changes)
    data = limits.model_dump()
    emit(data, args.json, ", ".join(f"{k}={'off' if v is None else v}" for k, v in data.items()))
    return 0
