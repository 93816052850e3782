"""`agentledger schedule create|list|show|pause|resume|trigger|backfill|delete` and
`agentledger hooks create|list|delete`: runs that start themselves.

A schedule lives in Temporal (a Schedule) and is listed in the mirror; `--tenant` (or
AGENTLEDGER_TENANT) says whose. A hook's deliveries come over HTTP (`agentledger serve`), to
the path `hooks create` prints with its secret, once.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, add_tenant, add_to_each, add_wait, emit

if TYPE_CHECKING:
    from agentledger import RunClient

OVERLAPS = ["skip", "buffer_one", "allow_all", "cancel_other"]
SCHEDULE_COLUMNS = ["name", "when", "agent", "overlap", "paused", "last_fired_at", "last_outcome"]
HOOK_COLUMNS = ["name", "agent", "task_template", "created_by"]


def span(text: str) -> float:
    """A span such as 30s, 15m, 1h, 7d: its seconds."""
    from agentledger.core.periods import span_seconds

    try:
        return span_seconds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def point(text: str) -> Any:
    """An ISO time, or an age back from now (24h, 7d)."""
    from agentledger.core.periods import parse_point

    try:
        return parse_point(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_commands(sub: Any) -> None:
    group = sub.add_parser("schedule", help="runs started on a schedule (Temporal Schedules)")
    commands = group.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help)
        if name != "list":
            p.add_argument("name", help="the schedule's name in its tenant")
        add_tenant(p)
        add_output_flags(p)
        add_wait(p)
        return p

    p = command("create", "a schedule that starts a run of an agent at each fire")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="a cron expression (UTC), e.g. '0 9 * * MON'")
    when.add_argument("--every", type=span, help="an interval: 30s, 15m, 1h, 1d")
    p.add_argument("--task", required=True, help="what each fire's run is asked to do")
    p.add_argument("--agent", help="the agent profile each fire runs (default: the default run)")
    p.add_argument(
        "--overlap",
        choices=OVERLAPS,
        default="skip",
        help="while the last fire's run is busy: skip (default), buffer_one, allow_all, "
        "cancel_other",
    )
    p.add_argument("--catchup", type=span, help="how late a fire missed may still run (1h)")
    p.add_argument("--jitter", type=span, help="each fire up to this late (30s)")
    p.add_argument("--paused", action="store_true", help="make it paused")
    command("list", "the schedules, each with its last fire")
    command("show", "a schedule: when, next fires, fires skipped, its latest runs")
    p = command("pause", "no fire until resumed")
    p.add_argument("--note", help="why (shown by show)")
    command("resume", "fire again")
    command("trigger", "fire now, once (as its overlap policy allows)")
    p = command("backfill", "make the fires it would have made between two times")
    p.add_argument("--from", dest="start", type=point, required=True, help="an ISO time or 7d")
    p.add_argument("--to", dest="end", type=point, required=True, help="an ISO time or 0h")
    command("delete", "remove it; the runs it started go on")

    group = sub.add_parser("hooks", help="signed webhooks that start runs")
    hooks = group.add_subparsers(dest="hooks_command", required=True, metavar="COMMAND")
    p = hooks.add_parser("create", help="a hook: each signed delivery starts a run")
    p.add_argument("name", help="its name in its tenant")
    p.add_argument(
        "--task",
        required=True,
        help="the task, with {body.path.to.field} filled in from each delivery's JSON body",
    )
    p.add_argument("--agent", help="the agent profile each delivery runs")
    p.add_argument(
        "--secret",
        help="its signing secret (as GitHub's webhook settings hold it); default: one made now",
    )
    p = hooks.add_parser("list", help="the hooks (never their secrets)")
    p = hooks.add_parser("delete", help="remove a hook: its deliveries are refused")
    p.add_argument("name", help="the hook's name, as `hooks list` shows it")
    add_to_each(hooks)


async def schedule(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    act = args.schedule_command
    if act == "list":
        rows = [row.model_dump(mode="json") for row in await client.schedules.listed()]
        text = render.table(rows, SCHEDULE_COLUMNS) if rows else "no schedule"
        emit(rows, args.json, text)
        return 0
    if act == "delete":
        done = await client.schedules.delete(args.name)
        emit({"name": args.name, "outcome": done}, args.json, done)
        return 0
    if act == "create":
        view = await client.schedules.create(
            args.name,
            task=args.task,
            agent=args.agent,
            cron=args.cron,
            every=args.every,
            overlap=args.overlap,
            catchup=args.catchup,
            jitter=args.jitter,
            paused=args.paused,
        )
    elif act == "pause":
        view = await client.schedules.pause(args.name, note=args.note)
    elif act == "resume":
        view = await client.schedules.resume(args.name)
    elif act == "trigger":
        view = await client.schedules.trigger(args.name)
    elif act == "backfill":
        view = await client.schedules.backfill(args.name, args.start, args.end)
    else:
        view = await client.schedules.show(args.name)
    emit(view.model_dump(mode="json"), args.json, view.text())
    return 0


async def hooks(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    act = args.hooks_command
    if act == "list":
        rows = [row.model_dump(mode="json") for row in await client.hooks.listed()]
        emit(rows, args.json, render.table(rows, HOOK_COLUMNS) if rows else "no hook")
    elif act == "delete":
        done = await client.hooks.delete(args.name)
        emit({"name": args.name, "outcome": done}, args.json, done)
    else:
        made = await client.hooks.create(
            args.name, task=args.task, agent=args.agent, secret=args.secret
        )
        text = (
            f"hook {made.hook.address}: POST deliveries to {made.path} on `agentledger serve`\n"
            f"secret (shown this once): {made.secret}\n"
            "sign each with X-Hub-Signature-256 (GitHub) or AgentLedger-Signature"
        )
        emit(made.model_dump(mode="json"), args.json, text)
    return 0
