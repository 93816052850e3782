"""Start, steer and inspect agent runs: `python starter.py --help`.

With nothing configured, `demo` and `up` bring up the embedded stack (Temporal dev server
with its Web UI, an embedded Postgres, the offline model) in `.agentrun/`. Every other
command talks to whatever stack the settings name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from temporalio.client import Client

from agentrun import backlog_cli, metrics, render, retention
from agentrun import operations as ops
from agentrun.cli_options import add_tenant, add_wait
from agentrun.client import connect
from agentrun.db import open_pool
from agentrun.models import DecisionResult, PendingApproval, RunSpec
from agentrun.periods import parse_age, parse_point
from agentrun.settings import Settings, SetupError, read_stack_file
from agentrun.stack import EmbeddedStack, port_open
from agentrun.telemetry import shutdown_tracing
from workflows import AgentRunWorkflow

DEMO_TASK = "Look up our refund policy and notify customer@example.com about it."


def emit(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def load_spec(args: argparse.Namespace) -> RunSpec:
    raw: dict[str, Any] = {}
    if args.spec:
        try:
            raw = yaml.safe_load(Path(args.spec).read_text()) or {}
        except OSError as err:
            raise ops.OperationError(f"cannot read {args.spec}: {err.strerror}") from err
        except yaml.YAMLError as err:
            raise ops.OperationError(f"{args.spec} is not valid YAML: {err}") from err
        if not isinstance(raw, dict):
            raise ops.OperationError(f"{args.spec}: a run spec must be a mapping")
    for field, value in (
        ("task", args.task),
        ("idempotency_key", args.idempotency_key),
        ("tenant", args.tenant),
        ("user", args.user),
    ):
        if value is not None:
            raw[field] = value
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ops.OperationError(f"invalid run spec: {problems}") from err


# ---------------------------------------------------------------- commands that need a client


def tenant_of(settings: Settings, args: argparse.Namespace) -> str | None:
    """--tenant, else AGENTRUN_TENANT: the only tenant whose runs a command sees."""
    return getattr(args, "tenant", None) or settings.tenant


@asynccontextmanager
async def mirror_pool(settings: Settings) -> AsyncIterator[AsyncConnectionPool | None]:
    """The mirror, for reads and decisions while no worker answers; None if not configured."""
    if not settings.database_url:
        yield None
        return
    pool = await open_pool(settings.database_url, max_size=2, connect_seconds=5)
    try:
        yield pool
    finally:
        await pool.close()


async def cmd_start(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    spec = load_spec(args)
    if settings.tenant and args.tenant is None:
        spec = spec.model_copy(update={"tenant": settings.tenant})
    started = await ops.start_run(
        client,
        spec,
        task_queue=settings.task_queue,
        indexed=settings.search_attributes,
        tenant=settings.tenant,
    )
    note = (
        "already exists (same idempotency key); not started again"
        if started.existing
        else "started"
    )
    emit(
        {
            "run_id": started.run_id,
            "existing": started.existing,
            "url": settings.run_link(started.run_id),
        },
        args.json,
        f"{started.run_id} {note}\n{settings.run_link(started.run_id)}",
    )
    return 0


async def cmd_approve(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    try:
        edit = json.loads(args.edit) if args.edit else None
    except json.JSONDecodeError as err:
        raise ops.OperationError(f"--edit is not valid JSON: {err}") from err
    if edit is not None and not isinstance(edit, dict):
        raise ops.OperationError("--edit takes a JSON object of the arguments to change")
    async with mirror_pool(settings) as mirror:
        result = await ops.approve(
            client,
            args.run,
            by=args.by,
            role=args.role,
            edit=edit,
            tenant=tenant_of(settings, args),
            wait=args.wait,
            mirror=mirror,
        )
    emit(result.model_dump(mode="json"), args.json, decision_text(result))
    return 0


def decision_text(result: DecisionResult) -> str:
    return result.note or f"{result.decision}; run is {result.status.value}"


async def cmd_reject(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        result = await ops.reject(
            client,
            args.run,
            by=args.by,
            role=args.role,
            reason=args.reason,
            tenant=tenant_of(settings, args),
            wait=args.wait,
            mirror=mirror,
        )
    emit(result.model_dump(mode="json"), args.json, decision_text(result))
    return 0


async def cmd_pause(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        result = await ops.pause(
            client, args.run, wait=args.wait, tenant=tenant_of(settings, args), mirror=mirror
        )
    emit(result.model_dump(mode="json"), args.json, result.message)
    return 0


async def cmd_resume(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        result = await ops.resume(
            client, args.run, wait=args.wait, tenant=tenant_of(settings, args), mirror=mirror
        )
    emit(result.model_dump(mode="json"), args.json, result.message)
    return 0


async def cmd_cancel(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        message = await ops.cancel(
            client, args.run, wait=args.wait, tenant=tenant_of(settings, args), mirror=mirror
        )
    print(message)
    return 0


async def cmd_status(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        report = await ops.inspect(
            client, args.run, wait=args.wait, tenant=tenant_of(settings, args), mirror=mirror
        )
    emit(
        report.flat_json(),
        args.json,
        render.run_report(report),
    )
    return 0


async def cmd_mirror(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """`mirror check` compares a run's mirror with its history; `rebuild` rewrites it."""
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        action = ops.rebuild_mirror if args.action == "rebuild" else ops.check_mirror
        report = await action(client, pool, args.run, payload_limit=settings.payload_limit_bytes)
    finally:
        await pool.close()
    emit(report, args.json, render.mirror_report(report))
    return 0 if report["agrees"] else 1


# ---------------------------------------------------------------- commands that read Postgres


async def cmd_list(settings: Settings, args: argparse.Namespace) -> int:
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        runs = await ops.list_runs(
            pool, status=args.status, limit=args.limit, tenant=tenant_of(settings, args)
        )
    finally:
        await pool.close()
    emit(runs, args.json, render.table(runs, ["run_id", "status", "tenant", "cost_usd", "task"]))
    return 0


async def cmd_receipt(settings: Settings, args: argparse.Namespace) -> int:
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        receipt = await ops.receipt(pool, args.run, tenant=tenant_of(settings, args))
    finally:
        await pool.close()
    emit(receipt, args.json, render.receipt_markdown(receipt))
    return 0


async def cmd_stats(settings: Settings, args: argparse.Namespace) -> int:
    try:
        since = parse_point(args.since) if args.since else None
    except ValueError as err:
        raise ops.OperationError(f"--since: {err}") from err
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        figures = await metrics.stats(pool, since=since, tenant=tenant_of(settings, args))
    finally:
        await pool.close()
    emit(figures.model_dump(mode="json"), args.json, render.stats_text(figures))
    return 0


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.older_than:
            age = parse_age(args.older_than)
        elif settings.retention_days is not None:
            age = timedelta(days=settings.retention_days)
        else:
            raise ops.OperationError(
                "say how old a finished run must be: --older-than 30d, or set "
                "AGENTRUN_RETENTION_DAYS"
            )
    except ValueError as err:
        raise ops.OperationError(f"--older-than: {err}") from err
    if age <= timedelta(0):
        raise ops.OperationError("--older-than must be more than zero")
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        result = await retention.prune(pool, cutoff=datetime.now(UTC) - age, dry_run=args.dry_run)
    finally:
        await pool.close()
    emit(result.model_dump(mode="json"), args.json, render.prune_text(result))
    return 0


# ---------------------------------------------------------------- the embedded stack


def existing_stack(settings: Settings) -> bool:
    """True when settings point at a stack that is up (set by env, or by `up`)."""
    host, _, port = settings.temporal_address.rpartition(":")
    return bool(read_stack_file(settings.home) or settings.database_url) and port_open(
        int(port), host or "127.0.0.1"
    )


async def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from worker import run_worker

    stack = EmbeddedStack(settings.home, temporal_port=args.port, ui_port=args.ui_port)
    endpoints = stack.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(
        "stack up:\n"
        + "\n".join(f"  {k}: {v}" for k, v in endpoints.items())
        + f"\ndata kept in {settings.home.resolve()}; Ctrl-C stops everything",
        flush=True,
    )
    try:
        if args.no_worker:
            await stop.wait()
        else:
            await run_worker(Settings.load(), identity="embedded-worker", stop=stop)
    finally:
        stack.stop()
    return 0


async def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Run a sample task end to end: start, stop at the approval gate, approve, verify."""
    from worker import run_worker

    stack = None
    if not existing_stack(settings):
        stack = EmbeddedStack(settings.home, temporal_port=args.port, ui_port=args.ui_port)
        print("starting the embedded stack (Temporal dev server, Postgres, offline model)...")
        stack.start()
        settings = Settings.load()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, identity="demo-worker", stop=stop))
    demo = asyncio.create_task(run_demo(settings))
    try:
        await asyncio.wait({worker, demo}, return_when=asyncio.FIRST_COMPLETED)
        if worker.done():  # the worker died first: say why instead of waiting on it
            demo.cancel()
            await worker
        return await demo
    finally:
        stop.set()
        try:
            await worker
        finally:
            if stack is not None:
                stack.stop()


async def run_demo(settings: Settings) -> int:
    client = await connect(settings)
    spec = RunSpec(task=DEMO_TASK, user="demo-user", idempotency_key=f"demo-{time.time_ns()}")
    started = await ops.start_run(
        client, spec, task_queue=settings.task_queue, indexed=settings.search_attributes
    )
    print(f"run {started.run_id} started: {settings.run_link(started.run_id)}")
    pending = await wait_for_approval(client, started.run_id)
    print(
        f"waiting for approval: {pending.tool}({json.dumps(pending.arguments)[:120]}...)"
        f"\n  needs role {pending.required_role!r}; approving as demo-approver"
    )
    decision = await ops.approve(
        client, started.run_id, by="demo-approver", role=pending.required_role
    )
    print(f"approval {decision.decision}; run is {decision.status.value}")
    result = await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    pool = await open_pool(settings.require_database(), max_size=2, connect_seconds=5)
    try:
        receipt = await ops.receipt(pool, started.run_id)
    finally:
        await pool.close()
    print()
    print(render.receipt_markdown(receipt))
    print(f"\nWeb UI: {settings.run_link(started.run_id)}")
    print("(the UI is live while the stack runs: `python starter.py up` serves it again)")
    return 0 if result.status.value == "completed" and receipt["outcome"] == "completed" else 1


async def wait_for_approval(
    client: Client, run_id: str, wait_seconds: float = 120
) -> PendingApproval:
    deadline = asyncio.get_running_loop().time() + wait_seconds
    while True:
        state = await ops.status(client, run_id)
        if state.pending_approval is not None:
            return state.pending_approval
        if asyncio.get_running_loop().time() > deadline or state.status.value in (
            "completed",
            "failed",
            "cancelled",
        ):
            raise ops.OperationError(
                f"run {run_id} never reached its approval gate ({state.status.value})"
            )
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------- the command line

ClientCommand = Callable[[Client, Settings, argparse.Namespace], Awaitable[int]]
CLIENT_COMMANDS: dict[str, ClientCommand] = {
    "start": cmd_start,
    "approve": cmd_approve,
    "reject": cmd_reject,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "cancel": cmd_cancel,
    "status": cmd_status,
    "mirror": cmd_mirror,
}
LOCAL_COMMANDS = {
    "list": cmd_list,
    "receipt": cmd_receipt,
    "stats": cmd_stats,
    "prune": cmd_prune,
    "up": cmd_up,
    "demo": cmd_demo,
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, *, json_flag: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON for machines")
        if name not in ("demo", "up"):
            add_wait(p)
        return p

    for name, help in (("demo", "run a sample task end to end"), ("up", "run the stack")):
        p = command(name, help)
        p.add_argument("--port", type=int, default=7233, help="Temporal frontend port")
        p.add_argument("--ui-port", type=int, default=8233, help="Web UI port")
        if name == "up":
            p.add_argument("--no-worker", action="store_true", help="leave the worker out")
    p = command("start", "start a run; prints its id", json_flag=True)
    p.add_argument("--task", help="what the agent should do")
    p.add_argument("--spec", help="a JSON or YAML run spec file (flags override it)")
    p.add_argument("--idempotency-key", help="starting again with it returns the same run")
    p.add_argument("--tenant")
    p.add_argument("--user")
    p = command("approve", "approve the pending action", json_flag=True)
    p.add_argument("run")
    p.add_argument("--by", required=True, help="who approves")
    p.add_argument("--role", default="approver", help="the approver's role")
    p.add_argument("--edit", help="JSON object of arguments to change before running")
    add_tenant(p)
    p = command("reject", "reject the pending action", json_flag=True)
    p.add_argument("run")
    p.add_argument("--by", required=True)
    p.add_argument("--role", default="approver")
    p.add_argument("--reason", required=True)
    add_tenant(p)
    for name, help in (
        ("pause", "pause at the next step boundary"),
        ("resume", "continue a paused run"),
        ("cancel", "end the run as cancelled, with its receipt"),
        ("status", "the state of a run: live, else as the mirror last saw it"),
        ("receipt", "what a run did, cost and changed"),
    ):
        p = command(name, help, json_flag=name in ("pause", "resume", "status", "receipt"))
        p.add_argument("run")
        add_tenant(p)
    p = command("mirror", "compare a run's mirror with its history, or rebuild it", json_flag=True)
    p.add_argument("action", choices=["check", "rebuild"])
    p.add_argument("run")
    p = command("list", "recent runs, from the Postgres mirror", json_flag=True)
    p.add_argument("--status", help="only runs in this status")
    p.add_argument("--limit", type=int, default=50)
    add_tenant(p)
    p = command("stats", "fleet figures: cost per completed run, failures, waits", json_flag=True)
    p.add_argument("--since", help="only runs started since: an ISO date, or an age like 24h, 7d")
    add_tenant(p)
    p = command("prune", "delete what runs that finished long ago recorded", json_flag=True)
    p.add_argument(
        "--older-than",
        help="finished longer ago than this (30d, 12h); default AGENTRUN_RETENTION_DAYS",
    )
    p.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    backlog_cli.add_commands(sub)
    return top


async def dispatch(args: argparse.Namespace) -> int:
    settings = Settings.load()
    if args.command == "backlog":
        return await backlog_cli.dispatch(settings, args)
    if args.command in LOCAL_COMMANDS:
        return await LOCAL_COMMANDS[args.command](settings, args)
    client = await connect(settings, within_seconds=args.wait)
    return await CLIENT_COMMANDS[args.command](client, settings, args)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return asyncio.run(dispatch(args))
    except (ops.OperationError, SetupError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    code = main()
    shutdown_tracing()
    # The Temporal client's Rust threads can outlive asyncio.run and abort interpreter
    # teardown (SIGABRT, temporalio/sdk-python#300): flush, then exit without it.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)
