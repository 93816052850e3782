"""Start, steer and inspect agent runs: `agentrun --help`.

With nothing configured, `demo` and `up` bring up the embedded stack (Temporal dev server
with its Web UI, an embedded Postgres, the offline model) in `.agentrun/`. Every other
command talks to whatever stack the settings name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from temporalio.client import Client

from agentrun import profiles
from agentrun.cli import approvers_cli, backlog_cli, render, sandbox_cli, tenants_cli
from agentrun.cli.cli_options import add_decider, add_tenant, add_wait, count
from agentrun.core.constants import TEMPORAL_PORT, WEB_UI_PORT
from agentrun.core.errors import OperationError, SetupError
from agentrun.core.models import DecisionResult, PendingApproval, RunSpec, WatchItem
from agentrun.core.periods import parse_age, parse_point
from agentrun.core.settings import Settings, read_stack_file
from agentrun.demo import support_desk
from agentrun.dev.stack import EmbeddedStack, port_open
from agentrun.ops import approver_keys, fork_ops, watch
from agentrun.ops import operations as ops
from agentrun.store import metrics, retention
from agentrun.store.db import command_pool, schema_version
from agentrun.store.tenant_store import TenantStore
from agentrun.temporal import deployments
from agentrun.temporal.client import connect
from agentrun.temporal.telemetry import shutdown_tracing
from agentrun.tools.loading import load_registry
from agentrun.worker.tool_flags import add_tool_flags, tool_sources
from agentrun.worker.worker_api import run_worker

# The demo's profiles: where `start --agent` looks when nothing else is named.
DEMO_AGENTS = "agentrun.demo:agents"
DEMO_TASK = "Look up our refund policy and notify customer@example.com about it."


def emit(data: Any, as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else render.for_terminal(text))


def load_spec(args: argparse.Namespace, settings: Settings) -> RunSpec:
    """The run's spec: the agent's profile expanded, the `--spec` file's fields over it (each
    replaces the profile's whole field), then the flags."""
    raw: dict[str, Any] = {}
    if args.agent:
        source = args.agents or settings.agents or DEMO_AGENTS
        raw = profiles.pick(profiles.load_agents(source), args.agent, source).spec_fields()
    if args.spec:
        raw.update(profiles.read_yaml_mapping(args.spec, "a run spec"))
    for field, value in (
        ("task", args.task),
        ("idempotency_key", args.idempotency_key),
        ("tenant", args.tenant),
        ("user", args.user),
        ("priority", getattr(args, "priority", None)),
    ):
        if value is not None:
            raw[field] = value
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise OperationError(f"invalid run spec: {problems}") from err


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
    async with command_pool(settings) as pool:
        yield pool


async def cmd_start(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    spec = load_spec(args, settings)
    if settings.tenant and args.tenant is None:
        spec = spec.model_copy(update={"tenant": settings.tenant})
    async with command_pool(settings) as pool:
        if args.agent and spec.allowed_tools:
            await ops.require_tools(pool, settings.task_queue, spec.allowed_tools)
        started = await ops.start_run(
            client,
            spec,
            task_queue=settings.task_queue,
            indexed=settings.search_attributes,
            mirror=pool,
            tenant=settings.tenant,
            limits=await TenantStore(pool).limits(spec.tenant),
        )
    note = (
        "already exists (same idempotency key); not started again"
        if started.existing
        else "started"
    )
    if started.queue_position is not None:
        note += f"; queued at position {started.queue_position} behind its tenant's cap"
    emit(
        {
            "run_id": started.run_id,
            "existing": started.existing,
            "queue_position": started.queue_position,
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
        raise OperationError(f"--edit is not valid JSON: {err}") from err
    if edit is not None and not isinstance(edit, dict):
        raise OperationError("--edit takes a JSON object of the arguments to change")
    async with mirror_pool(settings) as mirror:
        role, key = decider(settings, args)
        result = await ops.approve(
            client,
            args.run,
            by=args.by,
            role=role,
            edit=edit,
            tenant=tenant_of(settings, args),
            action_hash=args.action_hash,
            wait=args.wait,
            mirror=mirror,
            signer=key,
        )
    emit(result.model_dump(mode="json"), args.json, decision_text(result))
    return 0


def decider(
    settings: Settings, args: argparse.Namespace
) -> tuple[str, approver_keys.ApproverKey | None]:
    """The role a decision goes with, and the key that signs it when `--by` has one here."""
    key = approver_keys.load(settings.config_dir or approver_keys.default_config_dir(), args.by)
    if key is not None:
        if args.role and args.role != key.signer.role:
            raise OperationError(
                f"{args.by}'s key is registered for role {key.signer.role!r}, not {args.role!r}"
            )
        return key.signer.role, key
    if not args.role:
        raise OperationError(
            f"{args.by} has no approver key on this machine: say the role of this unsigned "
            "decision with --role (it counts only where no approver keys are configured), or "
            f"create a key with `agentrun approvers add {args.by} --role ROLE`"
        )
    return args.role, None


def decision_text(result: DecisionResult) -> str:
    return result.note or f"{result.decision}; run is {result.status.value}"


async def cmd_reject(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    async with mirror_pool(settings) as mirror:
        role, key = decider(settings, args)
        result = await ops.reject(
            client,
            args.run,
            by=args.by,
            role=role,
            reason=args.reason,
            tenant=tenant_of(settings, args),
            action_hash=args.action_hash,
            wait=args.wait,
            mirror=mirror,
            signer=key,
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


async def noting_silence(
    items: AsyncIterator[WatchItem], run_id: str, seconds: float
) -> AsyncIterator[WatchItem]:
    """The items; if the first is slow to come (`--wait`), say once on stderr what it waits for."""
    first = asyncio.ensure_future(anext(items, None))
    done, _ = await asyncio.wait({first}, timeout=seconds)
    if not done:
        print(
            f"note: nothing from {run_id} for {seconds:g}s: a live run's "
            "stream is served by a worker; is one running? (`agentrun-worker`)",
            file=sys.stderr,
            flush=True,
        )
    item = await first
    if item is None:
        return
    yield item
    async for item in items:
        yield item


async def cmd_watch(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """Follow a run live (an ended one from the mirror); exit 0 if it completed, else 1."""
    outcome: str | None = None
    in_text = False  # model text is printed as it arrives, on one line per reply
    async with contextlib.AsyncExitStack() as resources:
        pool = (
            await resources.enter_async_context(command_pool(settings))
            if settings.database_url
            else None
        )
        items = watch.watch(client, args.run, pool=pool, from_offset=args.from_offset)
        async for item in noting_silence(items, args.run, args.wait):
            if args.json:
                print(item.model_dump_json(), flush=True)
            elif item.kind == "text":
                print(render.for_terminal(item.text or ""), end="", flush=True)
                in_text = True
                continue
            else:
                line = render.for_terminal(render.watch_line(item, args.run))
                print(("\n" if in_text else "") + line, flush=True)
            in_text = False
            if item.kind == "receipt":
                outcome = item.data.get("outcome")
            elif item.type == "run.finished":
                outcome = outcome or item.data.get("status")
    return 0 if outcome == "completed" else 1


async def cmd_fork(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    try:
        edit = json.loads(args.edit_output) if args.edit_output is not None else None
    except json.JSONDecodeError as err:
        raise OperationError(f"--edit-output is not valid JSON: {err}") from err
    async with command_pool(settings) as pool:
        started = await fork_ops.fork_run(
            client,
            pool,
            args.run,
            from_step=args.from_step,
            edit_output=edit,
            key=args.key,
            task_queue=settings.task_queue,
            indexed=settings.search_attributes,
        )
    note = "already exists (same key); not started again" if started.existing else "started"
    emit(
        {
            "run_id": started.run_id,
            "existing": started.existing,
            "forked_from": args.run,
            "from_step": args.from_step,
            "url": settings.run_link(started.run_id),
        },
        args.json,
        f"{started.run_id} {note}: a fork of {args.run} from step {args.from_step}\n"
        f"{settings.run_link(started.run_id)}",
    )
    return 0


async def cmd_mirror(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """`mirror check` compares a run's mirror with its history; `rebuild` rewrites it."""
    async with command_pool(settings) as pool:
        action = ops.rebuild_mirror if args.action == "rebuild" else ops.check_mirror
        report = await action(client, pool, args.run, payload_limit=settings.payload_limit_bytes)
    emit(report, args.json, render.mirror_report(report))
    return 0 if report["agrees"] else 1


async def cmd_deploy(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    """Make a build current: new runs go to it; open runs stay on the build they started on."""
    name = args.deployment or settings.deployment_name
    await deployments.set_current_version(client, name, args.build_id)
    print(f"{name}/{args.build_id} is current: new runs start on it; open runs stay pinned")
    return 0


async def cmd_version(client: Client, settings: Settings, args: argparse.Namespace) -> int:
    await ops.status(client, args.run)  # an unknown run is a clear error
    version = await deployments.run_version(client, args.run)
    text = (
        f"{args.run} is {version.behavior} to {version.deployment_name}/{version.build_id}"
        if version.build_id
        else f"{args.run} runs on unversioned workers"
    )
    emit(version.model_dump(mode="json"), args.json, text)
    return 0


# ---------------------------------------------------------------- commands that read Postgres


async def cmd_list(settings: Settings, args: argparse.Namespace) -> int:
    async with command_pool(settings) as pool:
        runs = await ops.list_runs(
            pool, status=args.status, limit=args.limit, tenant=tenant_of(settings, args)
        )
    emit(
        runs,
        args.json,
        render.table(runs, ["run_id", "status", "tenant", "priority", "cost_usd", "task"]),
    )
    return 0


async def cmd_receipt(settings: Settings, args: argparse.Namespace) -> int:
    async with command_pool(settings) as pool:
        receipt = await ops.receipt(pool, args.run, tenant=tenant_of(settings, args))
    emit(receipt, args.json, render.receipt_markdown(receipt))
    return 0


async def cmd_stats(settings: Settings, args: argparse.Namespace) -> int:
    try:
        since = parse_point(args.since) if args.since else None
    except ValueError as err:
        raise OperationError(f"--since: {err}") from err
    async with command_pool(settings) as pool:
        figures = await metrics.stats(pool, since=since, tenant=tenant_of(settings, args))
    emit(figures.model_dump(mode="json"), args.json, render.stats_text(figures))
    return 0


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.older_than:
            age = parse_age(args.older_than)
        elif settings.retention_days is not None:
            age = timedelta(days=settings.retention_days)
        else:
            raise OperationError(
                "say how old a finished run must be: --older-than 30d, or set "
                "AGENTRUN_RETENTION_DAYS"
            )
    except ValueError as err:
        raise OperationError(f"--older-than: {err}") from err
    if age <= timedelta(0):
        raise OperationError("--older-than must be more than zero")
    async with command_pool(settings) as pool:
        result = await retention.prune(pool, cutoff=datetime.now(UTC) - age, dry_run=args.dry_run)
    emit(result.model_dump(mode="json"), args.json, render.prune_text(result))
    return 0


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Bring the database's schema up to this code's version; running it again is a no-op.
    Workers and `up` do it on start; reads never do."""
    async with command_pool(settings, migrate=True) as pool, pool.connection() as conn:
        version = await schema_version(conn)
    emit({"schema_version": version}, args.json, f"the schema is at version {version}")
    return 0


# ---------------------------------------------------------------- the embedded stack


def existing_stack(settings: Settings) -> bool:
    """True when settings point at a stack that is up (set by env, or by `up`)."""
    host, _, port = settings.temporal_address.rpartition(":")
    return bool(read_stack_file(settings.home) or settings.database_url) and port_open(
        int(port), host or "127.0.0.1"
    )


async def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    tools, mcp = tool_sources(args, settings)
    load_registry(tools)  # a bad reference exits 2 before the stack starts, not after
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
            async with command_pool(Settings.load(), migrate=True):
                pass  # a worker would migrate on start; without one, `up` does
            await stop.wait()
        else:
            await run_worker(
                tools, mcp=mcp, settings=Settings.load(), identity="embedded-worker", stop=stop
            )
    finally:
        stack.stop()
    return 0


async def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Run a sample task end to end: start, stop at the approval gate, approve, verify."""
    stack = None
    if not existing_stack(settings):
        stack = EmbeddedStack(settings.home, temporal_port=args.port, ui_port=args.ui_port)
        print("starting the embedded stack (Temporal dev server, Postgres, offline model)...")
        stack.start()
        settings = Settings.load()
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings=settings, identity="demo-worker", stop=stop))
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
    spec = support_desk.spec(
        task=DEMO_TASK, user="demo-user", idempotency_key=f"demo-{time.time_ns()}"
    )
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
    result = await ops.result(client, started.run_id)
    async with command_pool(settings) as pool:
        receipt = await ops.receipt(pool, started.run_id)
    print()
    print(render.receipt_markdown(receipt))
    print(f"\nWeb UI: {settings.run_link(started.run_id)}")
    print("(the UI is live while the stack runs: `agentrun up` serves it again)")
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
            raise OperationError(
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
    "watch": cmd_watch,
    "fork": cmd_fork,
    "deploy": cmd_deploy,
    "version": cmd_version,
}
LOCAL_COMMANDS = {
    "list": cmd_list,
    "receipt": cmd_receipt,
    "stats": cmd_stats,
    "prune": cmd_prune,
    "migrate": cmd_migrate,
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
        p.add_argument("--port", type=int, default=TEMPORAL_PORT, help="Temporal frontend port")
        p.add_argument("--ui-port", type=int, default=WEB_UI_PORT, help="Web UI port")
        if name == "up":
            p.add_argument("--no-worker", action="store_true", help="leave the worker out")
            add_tool_flags(p)
    p = command("start", "start a run; prints its id", json_flag=True)
    p.add_argument("--task", help="what the agent should do")
    p.add_argument("--agent", help="the agent profile to run (its fields fill the spec)")
    p.add_argument(
        "--agents",
        help="where profiles live: a YAML file or PKG.MODULE:ATTR (default AGENTRUN_AGENTS, "
        f"else {DEMO_AGENTS})",
    )
    p.add_argument("--spec", help="a JSON or YAML run spec file (flags override it)")
    p.add_argument("--idempotency-key", help="starting again with it returns the same run")
    p.add_argument("--tenant", help="whose run: its fairness key, weight and limits")
    p.add_argument("--user")
    p.add_argument(
        "--priority", type=int, help="1 (runs first) to 5 (last); default 3, or the spec's"
    )
    p = command("approve", "approve the pending action", json_flag=True)
    p.add_argument("run")
    add_decider(p)
    p.add_argument("--edit", help="JSON object of arguments to change before running")
    p = command("reject", "reject the pending action", json_flag=True)
    p.add_argument("run")
    add_decider(p)
    p.add_argument("--reason", required=True)
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
    p = command("watch", "follow a run live: steps, approvals, model text, receipt", json_flag=True)
    p.add_argument("run")
    p.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        help="start at this stream offset (an ended run: after this event seq)",
    )
    p = command(
        "fork", "a new run from another's step N, optionally with an edited output", json_flag=True
    )
    p.add_argument("run")
    p.add_argument("--from-step", type=int, required=True, help="the step (its number) to fork at")
    p.add_argument(
        "--edit-output", help="JSON that stands for step N's tool output (N must be a tool step)"
    )
    p.add_argument("--key", help="idempotency key of the fork (default: from run, step, edit)")
    p = command("deploy", "make a worker build current for new runs")
    p.add_argument("build_id", help="the AGENTRUN_BUILD_ID its workers were started with")
    p.add_argument("--deployment", help="Worker Deployment name (default AGENTRUN_DEPLOYMENT_NAME)")
    p = command("version", "the worker build a run is pinned to", json_flag=True)
    p.add_argument("run")
    p = command("list", "recent runs, from the Postgres mirror", json_flag=True)
    p.add_argument("--status", help="only runs in this status")
    p.add_argument("--limit", type=count, default=50, help="at most this many (default 50)")
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
    command(
        "migrate", "bring the database's schema up to date (workers do it on start)", json_flag=True
    )
    backlog_cli.add_commands(sub)
    tenants_cli.add_commands(sub)
    approvers_cli.add_commands(sub)
    sandbox_cli.add_commands(sub)
    return top


async def dispatch(args: argparse.Namespace) -> int:
    settings = Settings.load()
    if args.command == "backlog":
        return await backlog_cli.dispatch(settings, args)
    if args.command == "tenants":
        return await tenants_cli.dispatch(settings, args)
    if args.command == "approvers":
        return await approvers_cli.dispatch(settings, args)
    if args.command == "sandbox":
        return await sandbox_cli.dispatch(settings, args)
    if args.command in LOCAL_COMMANDS:
        return await LOCAL_COMMANDS[args.command](settings, args)
    client = await connect(settings, within_seconds=args.wait)
    return await CLIENT_COMMANDS[args.command](client, settings, args)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return asyncio.run(dispatch(args))
    except (OperationError, SetupError) as err:  # TenantError, ForkError, ... among them
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def console() -> NoReturn:
    """`agentrun ...`, and the `agentrun ...` console script (pyproject.toml)."""
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


if __name__ == "__main__":
    console()
