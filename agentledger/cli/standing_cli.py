"""`agentledger standing grant|list|revoke`: standing approvals, rules an approver grants
instead of one decision ("refund_order when cents <= 2000, for an hour"), within what the
tenant's policy lets approvers grant (`tenants set --standing-tools`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, emit

if TYPE_CHECKING:
    from agentledger import RunClient
    from agentledger.core.standing_approvals import StandingApproval

COLUMNS = ["rule_id", "rule", "granted_by", "expires_at", "revoked_at"]


def add_commands(sub: Any) -> None:
    group = sub.add_parser(
        "standing", help="standing approvals: rules that approve a tool's calls for a while"
    )
    commands = group.add_subparsers(dest="standing_command", required=True, metavar="COMMAND")
    p = commands.add_parser("grant", help="approve a tool's calls for a while, without asking")
    p.add_argument("tool", help="the tool whose calls it approves")
    p.add_argument("--hours", type=float, required=True, help="how long it lasts")
    p.add_argument("--when", help="a condition on the arguments, such as 'cents <= 2000'")
    p.add_argument("--run", dest="run_id", help="only this run's calls (a session's)")
    p.add_argument("--agent", help="only this agent's runs")
    p.add_argument("--tenant", help="the tenant (default AGENTLEDGER_TENANT)")
    add_output_flags(p)
    p = commands.add_parser("list", help="the tenant's standing approvals")
    p.add_argument("--all", action="store_true", help="revoked and expired ones too")
    p.add_argument("--tenant", help="the tenant (default AGENTLEDGER_TENANT)")
    add_output_flags(p)
    p = commands.add_parser("revoke", help="stop a standing approval: its calls ask again")
    p.add_argument("rule_id", help="the rule, as `standing list` names it (sa-...)")
    p.add_argument("--tenant", help="the tenant (default AGENTLEDGER_TENANT)")
    add_output_flags(p)


def _row(rule: StandingApproval) -> dict[str, Any]:
    return {
        "rule_id": rule.rule_id,
        "rule": rule.text(),
        "granted_by": rule.granted_by.name,
        "expires_at": rule.expires_at.isoformat(timespec="seconds"),
        "revoked_at": rule.revoked_at.isoformat(timespec="seconds") if rule.revoked_at else "",
    }


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    if args.standing_command == "grant":
        rule = await client.standing.grant(
            args.tool,
            hours=args.hours,
            when=args.when,
            run_id=args.run_id,
            agent=args.agent,
            tenant=args.tenant,
        )
        text = (
            f"standing approval {rule.rule_id}: {rule.text()}, until "
            f"{rule.expires_at.isoformat(timespec='seconds')}; "
            f"`agentledger standing revoke {rule.rule_id}` stops it"
        )
        emit(rule.model_dump(mode="json"), args.json, text)
    elif args.standing_command == "revoke":
        rule = await client.standing.revoke(args.rule_id, tenant=args.tenant)
        text = f"revoked {rule.rule_id} ({rule.text()}): its calls ask a person again"
        emit(rule.model_dump(mode="json"), args.json, text)
    else:
        rules = await client.standing.listed(tenant=args.tenant, live_only=not args.all)
        rows = [_row(rule) for rule in rules]
        text = render.table(rows, COLUMNS) if rows else "no standing approvals"
        emit([rule.model_dump(mode="json") for rule in rules], args.json, text)
    return 0
