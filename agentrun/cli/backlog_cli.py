"""`agentrun backlog enqueue|list|stop|resume|dead|retry --agent A`.

Commands that change a backlog go through Temporal; `list` and `dead` read the Postgres
mirror, so they answer even when no worker is running.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentrun.cli import render
from agentrun.cli.cli_options import add_wait
from agentrun.core.backlog_models import PolicyPatch
from agentrun.core.errors import OperationError
from agentrun.core.settings import Settings
from agentrun.ops import backlog_ops as ops
from agentrun.store.db import command_pool
from agentrun.temporal.client import connect

LIST_COLUMNS = "ordinal task_key title state attempts run last_error checkpoint".split()
DEAD_COLUMNS = ["ordinal", "task_key", "attempts", "run_id", "last_error"]


def add_commands(sub: Any) -> None:
    """Add the `backlog` command group to the top-level subparsers."""
    group = sub.add_parser("backlog", help="an agent's ordered task list (AFK backlogs)")
    commands = group.add_subparsers(dest="backlog_command", required=True)

    def command(name: str, help: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help)
        p.add_argument("--agent", required=True, help="whose backlog")
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON for machines")
        add_wait(p)
        return p

    p = command("enqueue", "add the tasks of a JSON or YAML file at the end, in order")
    p.add_argument("file", help="a list of {title, idempotency_key, spec}")
    p.add_argument("--max-attempts", type=int, help="runs per task before it is dead-lettered")
    p.add_argument("--parallelism", type=int, help="tasks of this agent run side by side")
    p.add_argument("--on-poison", choices=["continue", "stop"], help="after a task fails")
    p.add_argument("--retry-delay", type=float, help="seconds between attempts of a task")
    command("list", "every task in order: state, attempts, last error, checkpoint")
    command("stop", "graceful pause: running tasks stop at their next step boundary")
    command("resume", "continue a stopped backlog from where it stopped")
    command("dead", "the dead-letter list: tasks that used up their attempts")
    p = command("retry", "put one failed task back in its place")
    p.add_argument("task", help="the task's idempotency key")


def emit(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


async def dispatch(settings: Settings, args: argparse.Namespace) -> int:
    if args.backlog_command in ("list", "dead"):
        async with command_pool(settings) as pool:
            if args.backlog_command == "list":
                listing = await ops.list_tasks(pool, args.agent)
                emit(listing, args.json, _listing_text(listing))
            else:
                dead = await ops.dead_letters(pool, args.agent)
                text = render.table(dead, DEAD_COLUMNS) if dead else "no failed tasks"
                emit(dead, args.json, text)
        return 0
    client = await connect(settings, within_seconds=args.wait)
    if args.backlog_command == "enqueue":
        try:
            policy = PolicyPatch(
                max_attempts=args.max_attempts,
                parallelism=args.parallelism,
                on_poison=args.on_poison,
                retry_delay_seconds=args.retry_delay,
            )
        except ValueError as err:
            raise OperationError(f"invalid policy option: {err}") from err
        tasks = ops.load_tasks(args.file)
        result = await ops.enqueue(
            client,
            args.agent,
            tasks,
            task_queue=settings.task_queue,
            policy=policy,
            wait=args.wait,
        )
        applied = (
            f"added {len(result.added)}, ignored {len(result.ignored)} already in the backlog; "
            f"{result.total} tasks in all"
            if result.added or result.ignored
            else ""
        )
        held = (
            ops.held_note(args.agent, settings.task_queue, f"{len(result.held)} tasks")
            if result.held
            else ""
        )
        text = (
            "\n".join(part for part in (applied, held) if part)
            + ("\nthe backlog is stopped: `backlog resume` continues it" if result.stopped else "")
            + f"\n{settings.run_link(ops.backlog_id(args.agent))}"
        )
        emit(result.model_dump(mode="json"), args.json, text)
    elif args.backlog_command == "retry":
        retried = await ops.retry(client, args.agent, args.task, wait=args.wait)
        emit(retried.model_dump(mode="json"), args.json, retried.message)
    else:
        control = ops.stop if args.backlog_command == "stop" else ops.resume
        done = await control(client, args.agent, wait=args.wait)
        emit(done.model_dump(mode="json"), args.json, done.message)
    return 0


def _listing_text(listing: dict[str, Any]) -> str:
    status = listing["status"] + (f" ({listing['stop_reason']})" if listing["stop_reason"] else "")
    rows = []
    for task in listing["tasks"]:
        run = " ".join(
            str(part)
            for part in (task["run_id"], task["run_status"], task["current_step_id"])
            if part
        )
        # The run's accepted checkpoint, else the live step's mid-step progress.
        checkpoint = task["checkpoint"] or task["step_checkpoint"]
        rows.append(
            {
                **task,
                "title": ops.compact(task["title"], 30),
                "attempts": f"{task['attempts']}/{task['max_attempts']}",
                "run": run,
                "last_error": ops.compact(task["last_error"], 50) if task["last_error"] else "",
                "checkpoint": ops.compact(checkpoint, 40) if checkpoint else "",
            }
        )
    return f"backlog of {listing['agent']}: {status}\n" + render.table(rows, LIST_COLUMNS)
