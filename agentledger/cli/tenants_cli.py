"""`agentledger tenants set|show|list`: each tenant's share of the workers, its limits, and
its budgets per day and per month (agentledger.core.budgets), and the policy its runs
start under (agents, free-form specs, approval rules)."""

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
    "double_texting",
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


SETTINGS = (
    "weight",
    "max_in_flight",
    "max_queued",
    "model_calls_per_second",
    "allowed_priorities",
    "double_texting",
    "schedule_role",
)
# `--budget-mode` without a limit: every budget the subject has.
EVERY_PERIOD = "every"
# `--budget-day 20`, `--budget-month-tokens 1000000`: (period, limit) each flag sets.
BUDGET_FLAGS = {
    "budget_day": ("day", "usd"),
    "budget_day_tokens": ("day", "tokens"),
    "budget_month": ("month", "usd"),
    "budget_month_tokens": ("month", "tokens"),
}


def double_texting(text: str) -> list[str] | None:
    """`reject,enqueue`: the double-texting policies a message may ask for; `any`: all."""
    from agentledger.core.constants import DOUBLE_TEXTING

    if text.strip().lower() == "any":
        return None
    asked = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in asked if p not in DOUBLE_TEXTING]
    if unknown or not asked:
        raise argparse.ArgumentTypeError(
            f"expected some of {', '.join(DOUBLE_TEXTING)} (comma-separated) or any, got {text!r}"
        )
    return asked


POLICY = (
    "agents",
    "default_agent",
    "free_form",
    "rules",
    "requester_may_approve",
    "two_person",
    "standing_tools",
    "standing_max_hours",
    "always_ask",
)


def names_or_any(text: str) -> list[str] | None:
    """`a,b`: those agents; `any`: every profile loaded."""
    if text.strip().lower() == "any":
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def names_or_none(text: str) -> list[str]:
    """`a,b`: those tools; `none`: no tool."""
    if text.strip().lower() == "none":
        return []
    return [name.strip() for name in text.split(",") if name.strip()]


def name_or_none(text: str) -> str | None:
    return None if text.strip().lower() == "none" else text.strip()


def yes_no(text: str) -> bool:
    answer = {"yes": True, "on": True, "no": False, "off": False}.get(text.strip().lower())
    if answer is None:
        raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")
    return answer


def rule(text: str) -> Any:
    """One approval rule (agentledger.core.policy_rules, RULE_HELP)."""
    from pydantic import ValidationError

    from agentledger.core.policy_rules import parse_rule

    try:
        return parse_rule(text)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(
            "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in err.errors())
        ) from err
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


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
    p.add_argument("tenant", help="the tenant's name")
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
    p.add_argument(
        "--double-texting",
        type=double_texting,
        help="the double-texting policies a message to one of its sessions may ask for "
        "(reject, enqueue, interrupt, rollback; comma-separated), or any (any)",
    )
    p.add_argument(
        "--schedule-role",
        choices=["runner", "admin"],
        help="the least role that may make and change its schedules (admin)",
    )
    budget = p.add_argument_group(
        "budgets", "what the tenant (or one of its credentials) may spend per day and month"
    )
    for flag, (period, unit) in BUDGET_FLAGS.items():
        what = "USD" if unit == "usd" else "tokens"
        budget.add_argument(
            "--" + flag.replace("_", "-"),
            type=limit(float if unit == "usd" else int),
            help=f"{what} per {period} (UTC), or off",
        )
    budget.add_argument(
        "--budget-mode",
        choices=["advisory", "enforcing"],
        help="advisory warns (budget.warning at 80%%, budget.exceeded); enforcing also refuses "
        "starts (exit 5) and ends runs at the limit (budget_exhausted); default advisory",
    )
    budget.add_argument(
        "--budget-for",
        metavar="CREDENTIAL",
        help="the budget of one credential of the tenant (key:ID, oidc:ISSUER:SUBJECT, "
        "hook:NAME, schedule:NAME) instead of the whole tenant's",
    )
    policy = p.add_argument_group(
        "policy", "what the tenant's runs start under, whatever their spec (docs/security.md)"
    )
    policy.add_argument(
        "--agents", type=names_or_any, help="the agent profiles its callers may run: a,b or any"
    )
    policy.add_argument(
        "--default-agent",
        type=name_or_none,
        help="what a start naming no agent runs, or none (the only profile loaded, if one)",
    )
    policy.add_argument(
        "--free-form",
        type=name_or_none,
        help="the least role that may start a run from a spec of its own (no profile): "
        "runner, admin, or none (operators only); default admin",
    )
    policy.add_argument(
        "--rule",
        dest="rules",
        action="append",
        type=rule,
        help="an approval rule every run of the tenant carries; repeat for more (they replace "
        "the tenant's rules): TOOL [when CONDITION] [by ROLE] [xN], or deny TOOL [when "
        "CONDITION], e.g. 'refund_order when cents > 5000 by finance x2'",
    )
    policy.add_argument(
        "--no-rules", dest="rules", action="store_const", const=[], help="remove its rules"
    )
    policy.add_argument(
        "--requester-may-approve",
        type=yes_no,
        help="yes: whoever asked for a run may approve its calls (default no)",
    )
    policy.add_argument(
        "--two-person", type=yes_no, help="yes: every approval needs two distinct approvers"
    )
    policy.add_argument(
        "--standing-tools",
        type=names_or_none,
        help="the tools its approvers may grant standing approvals for: a,b, * for any, or "
        "none (the default)",
    )
    policy.add_argument(
        "--standing-max-hours", type=float, help="the longest a standing approval may last"
    )
    policy.add_argument(
        "--always-ask",
        type=names_or_none,
        help="tools whose every call asks a person, whatever standing approvals say: a,b or none",
    )
    add_output_flags(p)
    p = commands.add_parser("show", help="a tenant's settings and the policy its runs start under")
    p.add_argument("tenant", nargs="?", help="the tenant (AGENTLEDGER_TENANT's by default)")
    add_output_flags(p)
    p = commands.add_parser("list", help="every tenant: settings, runs in flight and queued")
    add_output_flags(p)


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render
    from agentledger.core.errors import InvalidRequest

    if args.tenants_command == "list":
        rows = [row.model_dump() for row in await client.tenants.listed()]
        emit(rows, args.json, render.table(rows, COLUMNS) if rows else "no tenant is configured")
        return 0
    if args.tenants_command == "show":
        return await show(client, args)
    # Flags left out are absent (SUPPRESS): they stay as they are.
    changes = {name: getattr(args, name) for name in SETTINGS if hasattr(args, name)}
    policy = {name: getattr(args, name) for name in POLICY if hasattr(args, name)}
    budgets = budget_changes(args)
    if not changes and not policy and not budgets:
        raise InvalidRequest(
            "say what to change: a limit (--weight, --max-in-flight, ...), the policy "
            "(--agents, --free-form, --rule, ...) or a budget (--budget-day, --budget-mode, "
            "...); `agentledger tenants set --help` lists them"
        )
    data: dict[str, Any] = {"tenant": args.tenant}
    lines: list[str] = []
    if changes:
        limits = await client.tenants.set(args.tenant, changes)
        data.update(limits.model_dump())
        lines.append(
            ", ".join(f"{k}={'off' if v is None else v}" for k, v in limits.model_dump().items())
        )
    if policy:
        found = await client.tenants.set_policy(args.tenant, policy)
        data["policy"] = found.model_dump(mode="json")
        lines += found.text()
    subject = getattr(args, "budget_for", None) or ""
    if EVERY_PERIOD in budgets:  # a mode alone: the subject's budgets, whichever it has
        mode = budgets.pop(EVERY_PERIOD)
        existing = await client.tenants.budgets(args.tenant)
        budgets = {b.period: dict(mode) for b in existing if b.subject == subject}
        if not budgets:
            raise InvalidRequest(
                f"{args.tenant} has no budget{f' for {subject}' if subject else ''} to set the "
                "mode of: give its limit too (--budget-day USD, --budget-day-tokens N, ...)"
            )
    if budgets:
        data["budgets"] = []
    for period, values in budgets.items():
        status = await client.tenants.set_budget(args.tenant, period, values, subject=subject)
        data["budgets"].append(None if status is None else status.model_dump(mode="json"))
        whose = f" for {subject}" if subject else ""
        lines.append(status.text() if status else f"{period} budget{whose} removed")
    emit(data, args.json, "\n".join(lines))
    return 0


def budget_changes(args: argparse.Namespace) -> dict[Any, dict[str, Any]]:
    """What each period's budget changes: its limits given, and the mode (for the periods
    given, else for both periods the subject has a budget for)."""
    periods: dict[Any, dict[str, Any]] = {}
    for flag, (period, unit) in BUDGET_FLAGS.items():
        if hasattr(args, flag):
            periods.setdefault(period, {})[unit] = getattr(args, flag)
    mode = getattr(args, "budget_mode", None)
    if mode is not None:
        for period in periods or (EVERY_PERIOD,):
            periods.setdefault(period, {})["mode"] = mode
    if hasattr(args, "budget_for") and not periods:
        from agentledger.core.errors import InvalidRequest

        raise InvalidRequest("--budget-for names whose budget: give one (--budget-day, ...)")
    return periods


async def show(client: RunClient, args: argparse.Namespace) -> int:
    """The tenant's limits, runs in flight and queued, its policy, and its budgets with
    their spend."""
    shown = await client.tenants.show(args.tenant)
    settings = shown.settings.model_dump() if shown.settings is not None else {}
    limits = ", ".join(
        f"{k}={'off' if settings.get(k) is None else settings[k]}"
        for k in (*SETTINGS, "in_flight", "queued")
        if k in settings
    )
    text = [f"tenant {shown.tenant}", limits or "limits: none set", *shown.policy.text()]
    text += [b.text() for b in shown.budgets] or ["budgets: none"]
    emit(shown.model_dump(mode="json"), args.json, "\n".join(text))
    return 0
