"""`agentledger tenants set|show|list`: each tenant's share of the workers, its limits, and
its budgets per day and per month (docs/triggers.md, "Budgets")."""

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
    add_output_flags(p)
    p = commands.add_parser("show", help="a tenant's settings, and its budgets with their spend")
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
        return await show(client, args.tenant, args.json)
    changes = {
        name: getattr(args, name)
        for name in SETTINGS
        if hasattr(args, name)  # flags left out are absent (SUPPRESS): they stay
    }
    budgets = budget_changes(args)
    if not changes and not budgets:
        raise InvalidRequest(
            "say what to change: a limit (--weight, --max-in-flight, ...) or a budget "
            "(--budget-day, --budget-mode, ...); `agentledger tenants set --help` lists them"
        )
    data: dict[str, Any] = {"tenant": args.tenant}
    lines = []
    if changes:
        limits = await client.tenants.set(args.tenant, changes)
        data.update(limits.model_dump())
        lines.append(", ".join(f"{k}={'off' if v is None else v}" for k, v in data.items()))
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


async def show(client: RunClient, tenant: str | None, as_json: bool) -> int:
    """The tenant's settings, runs in flight and queued, and its budgets with their spend."""
    named = tenant or client.tenant
    if named is None:
        from agentledger.core.errors import InvalidRequest

        raise InvalidRequest("name the tenant: `agentledger tenants show TENANT`")
    row = next((r for r in await client.tenants.listed() if r.tenant == named), None)
    budgets = await client.tenants.budgets(named)
    settings = row.model_dump() if row is not None else {"tenant": named}
    limits = ", ".join(
        f"{k}={'off' if settings.get(k) is None else settings[k]}"
        for k in COLUMNS[1:]
        if k in settings
    )
    text = [f"tenant {named}", limits or "limits: none set"]
    text += [b.text() for b in budgets] or ["budgets: none"]
    data = {**settings, "budgets": [b.model_dump(mode="json") for b in budgets]}
    emit(data, as_json, "\n".join(text))
    return 0
