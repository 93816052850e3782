"""`agentrun approvers add|list`: approvers as identities with keys, not typed names.

`add` makes an Ed25519 key pair: the private key stays in your config directory (mode
0600), the public key goes to the approvers table, and every run started afterwards (for
that tenant, or any) takes only decisions signed by one of its approvers.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentrun.cli import render
from agentrun.core.settings import Settings
from agentrun.ops import approver_keys
from agentrun.store.approver_store import ApproverStore
from agentrun.store.db import command_pool

COLUMNS = ["name", "role", "tenant", "key_id"]


def add_commands(sub: Any) -> None:
    group = sub.add_parser("approvers", help="who may approve, with which key (signed approvals)")
    commands = group.add_subparsers(dest="approvers_command", required=True)
    p = commands.add_parser("add", help="create a key pair for an approver and register it")
    p.add_argument("name", help="the approver; `approve --by NAME` then signs with this key")
    p.add_argument("--role", required=True, help="the role they approve in")
    p.add_argument("--tenant", help="only this tenant's runs (default: any tenant's)")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p = commands.add_parser("list", help="the registered approvers and their key ids")
    p.add_argument("--json", action="store_true", help="print JSON for machines")


async def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    async with command_pool(settings) as pool:
        store = ApproverStore(pool)
        if args.approvers_command == "add":
            config = settings.config_dir or approver_keys.default_config_dir()
            created = approver_keys.create(config, args.name, args.role, args.tenant)
            await store.add(created.signer)
            data: Any = created.signer.model_dump(mode="json")
            text = (
                f"approver {args.name} ({args.role}, key {created.signer.key_id}); private key "
                f"in {config / 'approvers'} (mode 0600). Runs started from now on take only "
                "signed decisions: `agentrun approve RUN --by "
                f"{args.name}` signs with it."
            )
        else:
            rows = [s.model_dump(mode="json") for s in await store.signers()]
            data = rows
            text = render.table(rows, COLUMNS) if rows else "no approvers: decisions are unsigned"
    print(json.dumps(data, indent=2) if args.json else text)
    return 0
