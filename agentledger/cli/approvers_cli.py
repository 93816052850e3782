"""`agentledger approvers add|list`: approvers as identities with keys, not typed names.

`add` makes an Ed25519 key pair: the private key stays in your config directory (mode
0600), the public key goes to the approvers table, and every run of that tenant started
afterwards takes only decisions signed by one of its approvers. An approver is registered
for one tenant (--tenant, or AGENTLEDGER_TENANT); one for every tenant's runs is an operator's
act (--any-tenant). A name is one person per tenant: `--replace` gives it a new key.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, emit

if TYPE_CHECKING:
    from agentledger import RunClient

COLUMNS = ["name", "role", "tenant", "key_id"]


def add_commands(sub: Any) -> None:
    group = sub.add_parser("approvers", help="who may approve, with which key (signed approvals)")
    commands = group.add_subparsers(dest="approvers_command", required=True, metavar="COMMAND")
    p = commands.add_parser("add", help="create a key pair for an approver and register it")
    p.add_argument("name", help="the approver; `approve --by NAME` then signs with this key")
    p.add_argument("--role", required=True, help="the role they approve in")
    p.add_argument(
        "--tenant", help="the tenant whose runs they decide (default AGENTLEDGER_TENANT)"
    )
    p.add_argument(
        "--any-tenant",
        action="store_true",
        help="operators only: an approver of every tenant's runs (not under AGENTLEDGER_TENANT)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="operators only: give a registered name a new key (its old keys stop counting)",
    )
    add_output_flags(p)
    p = commands.add_parser("list", help="the registered approvers and their key ids")
    p.add_argument("--tenant", help="only this tenant's (default AGENTLEDGER_TENANT)")
    add_output_flags(p)


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    if args.approvers_command == "add":
        signer = await client.approvers.add(
            args.name,
            role=args.role,
            tenant=args.tenant,
            any_tenant=args.any_tenant,
            replace=args.replace,
        )
        where = f"tenant {signer.tenant!r}" if signer.tenant else "any tenant"
        text = (
            f"approver {args.name} ({args.role}, {where}, key {signer.key_id}); private key "
            f"in {client.approvers.config_dir() / 'approvers'} (mode 0600). Runs started from "
            f"now on take only signed decisions: `agentledger approve RUN --by {args.name}` signs "
            "with it."
        )
        emit(signer.model_dump(mode="json"), args.json, text)
    else:
        rows = [
            s.model_dump(mode="json") for s in await client.approvers.listed(tenant=args.tenant)
        ]
        text = render.table(rows, COLUMNS) if rows else "no approvers: decisions are unsigned"
        emit(rows, args.json, text)
    return 0
