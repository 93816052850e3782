"""`agentledger notifications add|list|remove|deliveries|redeliver`: a tenant's notification
webhooks, told, signed, each approval its runs ask and each decision, each run's end and the
budget alerts; `--format slack` sends them as messages a
Slack incoming webhook takes; `redeliver` makes a recorded delivery again."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_to_each, emit

if TYPE_CHECKING:
    from agentledger import RunClient

FORMATS = ["json", "slack"]
COLUMNS = ["name", "url", "format", "created_at"]
DELIVERY_COLUMNS = ["delivery_id", "event", "status", "attempts", "last_status_code"]
NO_LINK = (
    "Slack messages carry a button to the inbox item once the workers know the door's "
    "address: set AGENTLEDGER_PUBLIC_URL (https://agents.example.com) where they run"
)


def add_commands(sub: Any) -> None:
    group = sub.add_parser(
        "notifications", help="webhooks told what a tenant's runs do (approvals asked, ends)"
    )
    commands = group.add_subparsers(dest="notifications_command", required=True, metavar="COMMAND")
    p = commands.add_parser("add", help="tell a URL what the tenant's runs do, signed")
    p.add_argument("name", help="its name in its tenant (the same name again replaces it)")
    p.add_argument("url", help="where deliveries are POSTed (http:// or https://)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="json",
        help="json: agentledger's body (default); slack: a Slack incoming webhook's message",
    )
    p.add_argument("--secret", help="signs each delivery (16+ characters); default: one made now")
    commands.add_parser("list", help="the tenant's notification webhooks (never their secrets)")
    p = commands.add_parser("remove", help="stop telling a webhook")
    p.add_argument("name", help="the webhook's name, as `notifications list` shows it")
    p = commands.add_parser("deliveries", help="each delivery to a webhook and what came of it")
    p.add_argument("name", help="the webhook's name, as `notifications list` shows it")
    p = commands.add_parser("redeliver", help="make a delivery again (its body, under its id)")
    p.add_argument("name", help="the webhook's name, as `notifications list` shows it")
    p.add_argument("delivery_id", help="the delivery, as `notifications deliveries` shows it")
    add_to_each(commands)


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    act = args.notifications_command
    if act == "add":
        made = await client.notifications.subscribe(
            args.name, args.url, secret=args.secret, format=args.format
        )
        lines = [
            f"webhook {made.name}: {made.url} is told, as {made.format}, what the tenant's runs "
            "do from now on",
            f"secret (shown this once): {made.secret}",
        ]
        if made.format == "slack" and client.config.public_url is None:
            lines.append(NO_LINK)
        emit(made.model_dump(mode="json"), args.json, "\n".join(lines))
    elif act == "remove":
        await client.notifications.remove(args.name)
        emit({"name": args.name}, args.json, f"webhook {args.name} is told nothing more")
    elif act == "redeliver":
        again = await client.notifications.redeliver(args.name, args.delivery_id)
        text = (
            f"delivery {again.delivery_id} ({again.event}) is made again; "
            f"`agentledger notifications deliveries {args.name}` shows what came of it"
        )
        emit(again.model_dump(mode="json"), args.json, text)
    elif act == "deliveries":
        found = await client.notifications.deliveries(args.name)
        rows = [each.model_dump(mode="json") for each in found]
        emit(rows, args.json, render.table(rows, DELIVERY_COLUMNS) if rows else "no delivery yet")
    else:
        listed = await client.notifications.listed()
        rows = [each.model_dump(mode="json") for each in listed]
        emit(rows, args.json, render.table(rows, COLUMNS) if rows else "no notification webhook")
    return 0
