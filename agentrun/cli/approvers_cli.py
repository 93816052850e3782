"""`agentrun approvers add|list`: approvers as identities with keys, not typed names.

`add` makes an Ed25519 key pair: the private key stays in your config directory (mode
0600), the public key goes to the approvers table, and every run of that tenant started
afterwards takes only decisions signed by one of its approvers. An approver is registered
for one tenant (--tenant, or AGENTRUN_TENANT); one for every tenant's runs is an operator's
act (--any-tenant). A name is one person per tenant: `--replace` gives it a new key.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentrun.cli import render
from agentrun.core.errors import OperationError
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
    p.add_argument("--tenant", help="the tenant whose runs they decide (default AGENTRUN_TENANT)")
    p.add_argument(
        "--any-tenant",
        action="store_true",
        help="operators only: an approver of every tenant's runs (not under AGENTRUN_TENANT)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="operators only: give a registered name a new key (its old keys stop counting)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p = commands.add_parser("list", help="the registered approvers and their key ids")
    p.add_argument("--tenant", help="only this tenant's (default AGENTRUN_TENANT)")
    p.add_argument("--json", action="store_true", help="print JSON for machines")


def scope(settings: Settings, args: argparse.Namespace) -> str | None:
    """The tenant an approvers command acts in: --tenant or AGENTRUN_TENANT (which a flag
    may repeat, never widen); None only for an operator's explicit --any-tenant."""
    flag = getattr(args, "tenant", None)
    if flag and settings.tenant and flag != settings.tenant:
        raise OperationError(
            f"this client acts for tenant {settings.tenant!r} (AGENTRUN_TENANT), not {flag!r}"
        )
    tenant = flag or settings.tenant
    if getattr(args, "replace", False) and settings.tenant:
        raise OperationError(
            "--replace gives a registered approver a new key: an operator's act, not one "
            f"under AGENTRUN_TENANT={settings.tenant}"
        )
    if getattr(args, "any_tenant", False):
        if tenant is not None:
            raise OperationError(
                f"--any-tenant registers an approver of every tenant's runs: an operator's "
                f"act, not one for tenant {tenant!r}; leave out --tenant and AGENTRUN_TENANT"
            )
        return None
    if tenant is None and args.approvers_command == "add":
        raise OperationError(
            "say whose runs this approver decides: --tenant NAME (or AGENTRUN_TENANT), or, "
            "as an operator, --any-tenant for every tenant's"
        )
    return tenant


async def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    tenant = scope(settings, args)
    async with command_pool(settings) as pool:
        store = ApproverStore(pool)
        if args.approvers_command == "add":
            where = f"tenant {tenant!r}" if tenant else "any tenant"
            if not args.replace and await store.taken(args.name, tenant):
                raise OperationError(
                    f"an approver {args.name!r} is already registered for {where}: names are "
                    "one person each; pick another name, or, as an operator replacing their "
                    "key on purpose, add --replace"
                )
            config = settings.config_dir or approver_keys.default_config_dir()
            created = approver_keys.create(
                config, args.name, args.role, tenant, replace=args.replace
            )
            if not await store.add(created.signer, replace=args.replace):
                raise OperationError(
                    f"an approver {args.name!r} was registered for {where} meanwhile; "
                    "add --replace to replace their key on purpose"
                )
            data: Any = created.signer.model_dump(mode="json")
            text = (
                f"approver {args.name} ({args.role}, {where}, key {created.signer.key_id}); "
                f"private key in {config / 'approvers'} (mode 0600). Runs started from now on "
                f"take only signed decisions: `agentrun approve RUN --by {args.name}` signs "
                "with it."
            )
        else:
            found = await (store.registered_for(tenant) if tenant else store.signers())
            rows = [s.model_dump(mode="json") for s in found]
            data = rows
            text = render.table(rows, COLUMNS) if rows else "no approvers: decisions are unsigned"
    print(json.dumps(data, indent=2) if args.json else text)
    return 0
