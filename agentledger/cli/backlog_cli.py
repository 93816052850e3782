"""`agentledger backlog enqueue|list|stop|resume|dead|retry --agent A`.

Commands that change a backlog go through Temporal; `list` and `dead` read the Postgres
mirror, so they answer even when no worker is running.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, add_wait, emit

if TYPE_CHECKING:
    from agentledger import RunClient

LIST_COLUMNS = "ordinal task_key title state attempts run last_error checkpoint".split()
DEAD_COLUMNS = ["ordinal", "task_key", "attempts", "run_id", "last_error"]


def add_commands(sub: Any) -> None:
    """Add the `backlog` command group to the top-level subparsers."""
    group = sub.add_parser("backlog", help="an agent's ordered task list (AFK backlogs)")
    commands = group.add_subparsers(dest="backlog_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help)
        p.add_argument("--agent", required=True, help="whose backlog")
        add_output_flags(p)
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


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    agent = args.agent
    if args.backlog_command == "list":
        listing = (await client.backlogs.tasks(agent)).model_dump()
        emit(listing, args.json, _listing_text(listing))
    elif args.backlog_command == "dead":
        dead = [task.model_dump() for task in await client.backlogs.dead(agent)]
        emit(dead, args.json, render.table(dead, DEAD_COLUMNS) if dead else "no failed tasks")
    elif args.backlog_command == "enqueue":
        from agentledger.core.backlog_models import backlog_id
        from agentledger.core.errors import InvalidRequest
        from agentledger.types import PolicyPatch

        try:
            policy = PolicyPatch(
                max_attempts=args.max_attempts,
                parallelism=args.parallelism,
                on_poison=args.on_poison,
                retry_delay_seconds=args.retry_delay,
            )
        except ValueError as err:
            raise InvalidRequest(f"invalid policy option: {err}") from err
        tasks = client.backlogs.load_tasks(args.file)
        result = await client.backlogs.enqueue(agent, tasks, policy=policy)
        applied = (
            f"added {len(result.added)}, ignored {len(result.ignored)} already in the backlog; "
            f"{result.total} tasks in all"
            if result.added or result.ignored
            else ""
        )
        text = (
            "\n".join(part for part in (applied, result.held_note) if part)
            + ("\nthe backlog is stopped: `backlog resume` continues it" if result.stopped else "")
            + f"\n{client.config.run_link(backlog_id(agent))}"
        )
        emit(result.model_dump(mode="json"), args.json, text)
    elif args.backlog_command == "retry":
        retried = await client.backlogs.retry(agent, args.task)
        emit(retried.model_dump(mode="json"), args.json, retried.message)
    else:
        control = client.backlogs.stop if args.backlog_command == "stop" else client.backlogs.resume
        done = await control(agent)
        emit(done.model_dump(mode="json"), args.json, done.message)
    return 0


def _listing_text(listing: dict[str, Any]) -> str:
    from agentledger.cli import render

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
                "title": render.compact(task["title"], 30),
                "attempts": f"{task['attempts']}/{task['max_attempts']}",
                "run": run,
                "last_error": render.compact(task["last_error"], 50) if task["last_error"] else "",
                "checkpoint": render.compact(checkpoint, 40) if checkpoint else "",
            }
        )
    return f"backlog of {listing['agent']}: {status}\n" + render.table(rows, LIST_COLUMNS)
