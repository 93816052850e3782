"""Start, steer and inspect agent runs: `agentledger --help`.

With nothing configured, `demo` and `up` bring up the embedded stack (Temporal dev server
with its Web UI, an embedded Postgres, the offline model) in `.agentledger/`. Every other
command talks to whatever stack the settings name.

A thin layer over `agentledger.RunClient`: each command reads its flags, calls one RunClient
method and prints the answer (a test holds it to that), so what the CLI can do, Python can.
The parser imports nothing heavy, so `agentledger --help` answers at once; a command imports
what it needs when it runs. Exit codes: each error class carries its own (agentledger.core.errors).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from agentledger.cli import (
    approvers_cli,
    backlog_cli,
    chat_cli,
    deploy_cli,
    eval_cli,
    notifications_cli,
    sandbox_cli,
    serve_cli,
    standing_cli,
    tenants_cli,
    triggers_cli,
)
from agentledger.cli.cli_options import (
    add_decider,
    add_output_flags,
    add_run,
    add_tenant,
    add_wait,
    count,
    emit,
    own_workflows,
    say,
)
from agentledger.core.constants import DEMO_AGENTS, TEMPORAL_PORT, WEB_UI_PORT
from agentledger.core.events import EventType
from agentledger.core.states import RunStatus
from agentledger.worker.tool_flags import add_tool_flags

if TYPE_CHECKING:
    from agentledger import AgentLedgerConfig, RunClient
    from agentledger.dev.stack import EmbeddedStack
    from agentledger.types import (
        ApproverKey,
        DecisionResult,
        PendingApproval,
        ReplayVerdict,
        RunSpec,
        WatchItem,
    )

DEMO_TASK = "Look up our refund policy and notify customer@example.com about it."
# A run's statuses, as `list --status` takes them.
STATUSES = [s.value for s in RunStatus]


def load_spec(args: argparse.Namespace, settings: AgentLedgerConfig) -> RunSpec:
    """The run's spec: the agent's profile expanded, the `--spec` file's fields over it (each
    replaces the profile's whole field), then the flags."""
    from pydantic import ValidationError

    from agentledger import RunSpec, profiles
    from agentledger.core.errors import InvalidRequest

    raw: dict[str, Any] = {}
    if args.agent:
        source = args.agents or settings.agents or DEMO_AGENTS
        agents = profiles.load_agents(source)
        raw = profiles.pick(agents, args.agent, source).spec_fields(agents)
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
        raise InvalidRequest(f"invalid run spec: {problems}") from err


def add_double_texting(p: argparse.ArgumentParser, *, keyed: bool = False) -> None:
    from agentledger.core.constants import DOUBLE_TEXTING

    when = (
        "if the key names a session under way with another task, that task is said to it; "
        if keyed
        else ""
    )
    p.add_argument(
        "--double-texting",
        choices=DOUBLE_TEXTING,
        help=f"{when}what it does while the session's turn is in flight (within the tenant's "
        "policy): reject (refused, exit 5), enqueue (the next turn), interrupt (the turn ends "
        "at its next step), rollback (the turn is forgotten); default the session's own",
    )


def json_argument(text: str | None, flag: str) -> Any:
    """A flag's JSON value (None when absent), or InvalidInput naming the flag."""
    from agentledger.core.errors import InvalidRequest

    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidRequest(f"{flag} is not valid JSON: {err}") from err


# ---------------------------------------------------------------- starting runs


async def cmd_start(client: RunClient, args: argparse.Namespace) -> int:
    started = await client.runs.start(
        spec=load_spec(args, client.config),
        require_tools=bool(args.agent),
        double_texting=args.double_texting,
        wait=args.wait,
    )
    note = (
        "already exists (same idempotency key); not started again"
        if started.existing
        else "started"
    )
    if started.queue_position is not None:
        note += f"; queued at position {started.queue_position} behind its tenant's cap"
    if started.said is not None:
        note = f"is a session under way: its task said to it as a message ({started.said.note})"
    link = client.config.run_link(started.run_id)
    unserved = await client.runs.unserved_warning(wait=min(args.wait, 2.0))
    if unserved is not None:
        print(f"warning: {unserved}", file=sys.stderr, flush=True)
    emit(
        {
            "run_id": started.run_id,
            "existing": started.existing,
            "queue_position": started.queue_position,
            "url": link,
            "no_worker_warning": unserved,
            "said": started.said.model_dump(mode="json") if started.said else None,
        },
        args.json,
        f"{started.run_id} {note}\n{link}",
    )
    return 0


async def cmd_fork(client: RunClient, args: argparse.Namespace) -> int:
    started = await client.runs.fork(
        args.run,
        from_step=args.from_step,
        edit_output=json_argument(args.edit_output, "--edit-output"),
        key=args.key,
    )
    note = "already exists (same key); not started again" if started.existing else "started"
    link = client.config.run_link(started.run_id)
    emit(
        {
            "run_id": started.run_id,
            "existing": started.existing,
            "forked_from": args.run,
            "from_step": args.from_step,
            "url": link,
        },
        args.json,
        f"{started.run_id} {note}: a fork of {args.run} from step {args.from_step}\n{link}",
    )
    return 0


# ---------------------------------------------------------------- acting on a run


def decider(client: RunClient, args: argparse.Namespace) -> tuple[str, ApproverKey | None]:
    """The role a decision goes with, and the key that signs it when `--by` has one here."""
    from agentledger.core.errors import InvalidRequest

    key = client.approvers.key(args.by)
    if key is not None:
        if args.role and args.role != key.signer.role:
            raise InvalidRequest(
                f"{args.by}'s key is registered for role {key.signer.role!r}, not {args.role!r}"
            )
        return key.signer.role, key
    if not args.role:
        raise InvalidRequest(
            f"{args.by} has no approver key on this machine: say the role of this unsigned "
            "decision with --role (it counts only where no approver keys are configured), or "
            f"create a key for the runs started from now on with `agentledger approvers add "
            f"{args.by} --role ROLE --tenant TENANT`"
        )
    return args.role, None


def decision_text(result: DecisionResult) -> str:
    return result.note or f"{result.decision}; run is {result.status.value}"


async def cmd_approve(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.core.errors import InvalidRequest

    edit = json_argument(args.edit, "--edit")
    if edit is not None and not isinstance(edit, dict):
        raise InvalidRequest("--edit takes a JSON object: the fields to change, null removes one")
    replace = json_argument(args.arguments, "--arguments")
    if replace is not None and not isinstance(replace, dict):
        raise InvalidRequest("--arguments takes a JSON object: the whole arguments")
    role, key = decider(client, args)
    result = await client.runs.approve(
        args.run,
        by=args.by,
        role=role,
        edit=edit,
        replace=replace,
        signer=key,
        action_hash=args.action_hash,
    )
    emit(result.model_dump(mode="json"), args.json, decision_text(result))
    return 0


async def cmd_reject(client: RunClient, args: argparse.Namespace) -> int:
    role, key = decider(client, args)
    result = await client.runs.reject(
        args.run,
        by=args.by,
        role=role,
        reason=args.reason,
        signer=key,
        action_hash=args.action_hash,
    )
    emit(result.model_dump(mode="json"), args.json, decision_text(result))
    return 0


async def cmd_pause(client: RunClient, args: argparse.Namespace) -> int:
    control = client.runs.resume if args.command == "resume" else client.runs.pause
    result = await control(args.run)
    emit(result.model_dump(mode="json"), args.json, result.message)
    return 0


async def cmd_say(client: RunClient, args: argparse.Namespace) -> int:
    result = await client.runs.say(
        args.run, args.message, by=args.by, double_texting=args.double_texting
    )
    emit(result.model_dump(mode="json"), args.json, result.note)
    return 0


async def cmd_end(client: RunClient, args: argparse.Namespace) -> int:
    result = await client.sessions.end(args.run, by=args.by)
    emit(result.model_dump(mode="json"), args.json, result.message)
    return 0


async def cmd_cancel(client: RunClient, args: argparse.Namespace) -> int:
    message = await client.runs.cancel(args.run)
    emit({"run_id": args.run, "message": message}, args.json, message)
    return 0


# ---------------------------------------------------------------- reading a run


async def cmd_status(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    report = await client.runs.inspect(args.run)
    emit(report.flat_json(), args.json, render.run_report(report))
    return 0


async def noting_silence(
    items: AsyncIterator[WatchItem], run_id: str, seconds: float, task_queue: str
) -> AsyncIterator[WatchItem]:
    """The items; if the first is slow to come (`--wait`), say once on stderr what it waits for."""
    import asyncio

    from agentledger.core.advice import worker_command

    first = asyncio.ensure_future(anext(items, None))
    done, _ = await asyncio.wait({first}, timeout=seconds)
    if not done:
        print(
            f"note: nothing from {run_id} for {seconds:g}s: a live run's stream is served by "
            f"a worker; is one running? ({worker_command(task_queue)})",
            file=sys.stderr,
            flush=True,
        )
    item = await first
    if item is None:
        return
    yield item
    async for item in items:
        yield item


async def cmd_watch(client: RunClient, args: argparse.Namespace) -> int:
    """Follow a run live (an ended one from the mirror); exit 0 if it completed, else 1."""
    from agentledger.cli import render

    outcome: str | None = None
    in_text = False  # model text is printed as it arrives, on one line per reply
    items = client.runs.watch(args.run, from_offset=args.from_offset)
    async for item in noting_silence(items, args.run, args.wait, client.config.task_queue):
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
        elif item.type == EventType.RUN_FINISHED:
            outcome = outcome or item.data.get("status")
    return 0 if outcome == "completed" else 1


async def cmd_receipt(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render

    receipt = (await client.runs.receipt(args.run)).model_dump(mode="json")
    emit(receipt, args.json, render.receipt_markdown(receipt))
    return 0


async def cmd_version(client: RunClient, args: argparse.Namespace) -> int:
    version = await client.runs.version(args.run)
    text = (
        f"{args.run} is {version.behavior} to {version.deployment_name}/{version.build_id}"
        if version.build_id
        else f"{args.run} runs on unversioned workers"
    )
    emit(version.model_dump(mode="json"), args.json, text)
    return 0


async def cmd_list(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render
    from agentledger.core.listings import engines_own

    mirrored = await client.runs.recent(status=args.status, limit=args.limit, engines_own=args.all)
    held = await client.runs.unmirrored(status=args.status, limit=args.limit)
    held = [row for row in held if args.all or not engines_own(row.run_id)]
    found = [row.model_dump() for row in (held + mirrored)[: args.limit]]
    columns = ["run_id", "status", "tenant", "agent", "priority", "cost_usd", "task"]
    emit(found, args.json, render.table(found, columns))
    return 0


async def cmd_stats(client: RunClient, args: argparse.Namespace) -> int:
    from agentledger.cli import render
    from agentledger.core.errors import InvalidRequest
    from agentledger.core.periods import parse_point

    try:
        since = parse_point(args.since) if args.since else None
    except ValueError as err:
        raise InvalidRequest(f"--since: {err}") from err
    figures = await client.mirror.stats(since=since)
    emit(figures.model_dump(mode="json"), args.json, render.stats_text(figures))
    return 0


async def cmd_costs(client: RunClient, args: argparse.Namespace) -> int:
    import csv
    import io

    from agentledger.cli import render
    from agentledger.core.errors import InvalidRequest
    from agentledger.core.periods import parse_point

    try:
        since = parse_point(args.since)
    except ValueError as err:
        raise InvalidRequest(f"--since: {err}") from err
    by = [d.strip() for d in (args.by or "").split(",") if d.strip()]
    rows = [row.model_dump() for row in await client.costs.summary(by, since=since)]
    columns = [*by, "calls", "tokens_in", "tokens_out", "cost_usd"]
    if args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        print(out.getvalue(), end="", flush=True)
        return 0
    emit(rows, args.json, render.table(rows, columns) if rows else f"no model calls since {since}")
    return 0


# ---------------------------------------------------------------- the mirror, schema, builds


async def cmd_mirror(client: RunClient, args: argparse.Namespace) -> int:
    """`mirror check` compares a run's mirror with its history; `rebuild` rewrites it."""
    from agentledger.cli import render

    action = client.mirror.rebuild if args.action == "rebuild" else client.mirror.check
    report = (await action(args.run)).model_dump()
    emit(report, args.json, render.mirror_report(report))
    return 0 if report["agrees"] else 1


async def cmd_prune(client: RunClient, args: argparse.Namespace) -> int:
    from datetime import timedelta

    from agentledger.cli import render
    from agentledger.core.errors import InvalidRequest
    from agentledger.core.periods import parse_age

    try:
        if args.older_than:
            age = parse_age(args.older_than)
        elif client.config.retention_days is not None:
            age = timedelta(days=client.config.retention_days)
        else:
            raise InvalidRequest(
                "say how old a finished run must be: --older-than 30d, or set "
                "AGENTLEDGER_RETENTION_DAYS"
            )
    except ValueError as err:
        raise InvalidRequest(f"--older-than: {err}") from err
    if age <= timedelta(0):
        raise InvalidRequest("--older-than must be more than zero")
    result = await client.mirror.prune(older_than=age, dry_run=args.dry_run)
    emit(result.model_dump(mode="json"), args.json, render.prune_text(result))
    return 0


async def cmd_migrate(client: RunClient, args: argparse.Namespace) -> int:
    """Bring the database's schema up to this code's version; running it again is a no-op.
    Workers and `up` do it on start; reads never do."""
    version = await client.migrate()
    emit({"schema_version": version}, args.json, f"the schema is at version {version}")
    return 0


async def cmd_deploy(client: RunClient, args: argparse.Namespace) -> int:
    """`deploy check`: replay the open runs; `deploy BUILD`: make a build current (after the
    check passes): new runs go to it; open runs stay on the build they started on."""
    if args.build_id == "check":
        return await cmd_deploy_check(client, args)
    if args.build_id in deploy_cli.COMMANDS:
        return await deploy_cli.COMMANDS[args.build_id](client, args)
    name = await client.deploys.make_current(
        args.build_id,
        deployment=args.deployment,
        workflows=own_workflows(args.workflows),
        check=not args.skip_check,
    )
    emit(
        {"deployment": name, "build_id": args.build_id, "current": True},
        args.json,
        f"{name}/{args.build_id} is current: new runs start on it; open runs stay pinned",
    )
    return 0


async def cmd_deploy_check(client: RunClient, args: argparse.Namespace) -> int:
    def progress(verdict: ReplayVerdict) -> None:
        if not args.json:
            at = f" at event {verdict.event_id}" if verdict.event_id else ""
            where = "" if verdict.ok else f"{at}: {verdict.error}"
            state = "open" if verdict.open else "closed"
            print(f"{'ok  ' if verdict.ok else 'FAIL'} {verdict.workflow_id} ({state}){where}")

    report = await client.deploys.check(
        workflows=own_workflows(args.workflows), closed=args.closed, progress=progress
    )
    failed = len(report.failed)
    replayed = report.model_dump(mode="json") | {"passed": report.passed}
    text = f"{len(report.verdicts)} run(s) replayed, {failed} failed" + (
        "" if report.passed else ": deploying this code would break them"
    )
    if args.eval:  # the new agent version too: replay and eval, one verdict
        return await eval_cli.with_replay(client, args, replayed, text)
    emit(replayed, args.json, text)
    return 0 if report.passed else 1


# ---------------------------------------------------------------- the embedded stack


def existing_stack(settings: AgentLedgerConfig) -> bool:
    """True when settings point at a stack that is up (set by env, or by `up`)."""
    from agentledger.core.config import read_stack_file
    from agentledger.dev.stack import port_open

    host, _, port = settings.temporal_address.rpartition(":")
    return bool(read_stack_file(settings.home) or settings.database_url) and port_open(
        int(port), host or "127.0.0.1"
    )


def embedded_stack(
    settings: AgentLedgerConfig, args: argparse.Namespace, command: str
) -> EmbeddedStack:
    """The stack `up` and `demo` start: on the ports asked for, or beside whatever holds the
    defaults (each move said)."""
    from agentledger.dev.stack import EmbeddedStack, stack_ports

    port, ui_port, moves = stack_ports(settings.home, args.port, args.ui_port)
    for move in moves:
        say(args, move)
    return EmbeddedStack(settings.home, temporal_port=port, ui_port=ui_port, command=command)


async def cmd_up(client: RunClient, args: argparse.Namespace) -> int:
    import asyncio

    from agentledger.cli.interrupts import Interrupts, start_stack
    from agentledger.tools.loading import DEMO_TOOLS, load_registry
    from agentledger.worker.tool_flags import tool_sources
    from agentledger.worker.worker_api import run_worker

    interrupts = await Interrupts().install()
    settings = client.config
    tools, mcp = tool_sources(args, settings)
    if not tools and not mcp:
        tools = [DEMO_TOOLS]  # the dev stack serves the demo's tools unless given others
    load_registry(tools)  # a bad reference exits 2 before the stack starts, not after
    stack = embedded_stack(settings, args, command="up")
    endpoints = dict(await start_stack(stack, interrupts))
    interrupts.on_hurry(stack.abandon)
    http_door = serve_cli.door_beside(args, settings.http)
    if http_door is not None:
        endpoints["http_url"] = http_door.url
    if args.json:
        emit({**endpoints, "home": str(settings.home.resolve())}, True, "")
    else:
        print(
            "stack up:\n"
            + "\n".join(f"  {k}: {v}" for k, v in endpoints.items())
            + f"\ndata kept in {settings.home.resolve()}; Ctrl-C stops everything",
            flush=True,
        )
    stop = interrupts.stop
    # The stack's addresses, which it wrote to its file on starting.
    stacked_settings = settings.with_stack()
    serving = http_door.start(stacked_settings, stop) if http_door is not None else None
    try:
        if args.no_worker:
            from agentledger import RunClient

            async with RunClient.lazy(stacked_settings) as stacked:
                await stacked.migrate()  # a worker would migrate on start; without one, `up` does
            await stop.wait()
        else:
            await run_worker(
                tools,
                mcp=mcp,
                settings=stacked_settings,
                identity="embedded-worker",
                stop=stop,
            )
    except Exception:
        if not stop.is_set():
            raise  # a failure of its own; after a Ctrl-C, what stopping broke is no news
    finally:
        stop.set()
        if serving is not None:
            await serving
        await asyncio.to_thread(stack.stop)
    # The way `up` is meant to end (it says so): not a failure.
    print(f"stopped; data kept in {settings.home.resolve()}", file=sys.stderr, flush=True)
    return 0


async def cmd_demo(client: RunClient, args: argparse.Namespace) -> int:
    """Run a sample task end to end: start, stop at the approval gate, approve, verify."""
    import asyncio

    from agentledger import RunClient
    from agentledger.cli.interrupts import Interrupted, Interrupts, start_stack, stopped_line
    from agentledger.dev.stack import stack_owner
    from agentledger.tools.loading import DEMO_TOOLS
    from agentledger.worker.worker_api import run_worker

    interrupts = await Interrupts().install()
    settings = client.config
    stack = None
    holder = stack_owner(settings.home)
    # A stack `up` keeps runs until its person stops it: the demo shares it. One another demo
    # started stops when that demo ends, so this demo starts its own, which is refused.
    if not existing_stack(settings) or (holder is not None and holder.command == "demo"):
        stack = embedded_stack(settings, args, command="demo")
        say(args, "starting the embedded stack (Temporal dev server, Postgres, offline model)...")
        await start_stack(stack, interrupts)
        interrupts.on_hurry(stack.abandon)
        settings = settings.with_stack()
    stop = interrupts.stop
    worker = asyncio.create_task(
        run_worker([DEMO_TOOLS], settings=settings, identity="demo-worker", stop=stop)
    )
    stopped = asyncio.create_task(stop.wait())
    try:
        async with RunClient.lazy(settings) as demo_runs:
            await demo_runs.migrate()  # the worker migrates too, meanwhile; either goes first
            demo = asyncio.create_task(run_demo(demo_runs, args))
            await asyncio.wait({worker, demo, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                demo.cancel()
            elif worker.done():  # the worker died first: say why instead of waiting on it
                demo.cancel()
                await worker
            else:
                return await demo
    except Exception:
        if not stop.is_set():
            raise
    finally:
        stopped.cancel()
        stop.set()
        try:
            await worker
        finally:
            if stack is not None:
                await asyncio.to_thread(stack.stop)
    raise Interrupted(
        stopped_line(settings.home) if stack is not None else "interrupted: the demo is stopped"
    )


async def run_demo(client: RunClient, args: argparse.Namespace) -> int:
    import time

    from agentledger.cli import render
    from agentledger.demo import support_desk

    settings = client.config
    # The demo's run is the caller's tenant's (AGENTLEDGER_TENANT), as any run it starts is.
    spec = support_desk.spec(
        task=DEMO_TASK, user="demo-user", idempotency_key=f"demo-{time.time_ns()}"
    )
    started = await client.runs.start(spec=spec)
    run_id = started.run_id
    say(args, f"run {run_id} started: {settings.run_link(run_id)}")
    pending = await wait_for_approval(client, run_id)
    say(
        args,
        f"waiting for approval: {pending.tool}({json.dumps(pending.arguments)[:120]}...)"
        f"\n  needs role {pending.required_role!r}; approving as demo-approver",
    )
    decision = await client.runs.approve(run_id, by="demo-approver", role=pending.required_role)
    say(args, f"approval {decision.decision}; run is {decision.status.value}")
    result = await client.runs.result(run_id)
    receipt = (await client.runs.receipt(run_id)).model_dump(mode="json")
    completed = result.status.value == "completed" and receipt["outcome"] == "completed"
    if args.json:
        emit(
            {
                "run_id": run_id,
                "status": result.status.value,
                "url": settings.run_link(run_id),
                "receipt": receipt,
            },
            True,
            "",
        )
    else:
        # The whole receipt goes to a file, the terminal gets its gist: the demo stays a page.
        kept = settings.home / "receipts" / f"{run_id}.md"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(render.receipt_markdown(receipt) + "\n")
        print(f"receipt: {render.receipt_line(receipt)}")
        print(
            f"the whole receipt: {kept} (and `agentledger receipt {run_id}` under `agentledger up`)"
        )
        print(f"Web UI: {settings.run_link(run_id)} (live while the stack runs: `agentledger up`)")
    return 0 if completed else 1


async def wait_for_approval(
    client: RunClient, run_id: str, wait_seconds: float = 120
) -> PendingApproval:
    import asyncio

    from agentledger.core.errors import OperationError

    deadline = asyncio.get_running_loop().time() + wait_seconds
    while True:
        state = await client.runs.status(run_id)
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


def cmd_settings(args: argparse.Namespace) -> int:
    """The settings in effect, as every command and worker here reads them; no secret shown."""
    from agentledger.core.config import AgentLedgerConfig

    shown = AgentLedgerConfig.load().shown()
    emit(shown, args.json, "\n".join(f"{name}={value}" for name, value in shown.items()))
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    """A completion script, made from this very parser: it needs no stack and no settings."""
    from agentledger.cli import completion

    script = completion.script(parser(), args.shell)
    if args.json:
        print(json.dumps({"shell": args.shell, "script": script}, indent=2))
    else:
        print(script, end="")
    return 0


# ---------------------------------------------------------------- the command line

Command = Callable[["RunClient", argparse.Namespace], Awaitable[int]]
COMMANDS: dict[str, Command] = {
    "start": cmd_start,
    "approve": cmd_approve,
    "reject": cmd_reject,
    "pause": cmd_pause,
    "resume": cmd_pause,
    "cancel": cmd_cancel,
    "say": cmd_say,
    "chat": chat_cli.cmd_chat,
    "end": cmd_end,
    "status": cmd_status,
    "receipt": cmd_receipt,
    "mirror": cmd_mirror,
    "watch": cmd_watch,
    "fork": cmd_fork,
    "deploy": cmd_deploy,
    "version": cmd_version,
    "list": cmd_list,
    "stats": cmd_stats,
    "costs": cmd_costs,
    "prune": cmd_prune,
    "migrate": cmd_migrate,
    "up": cmd_up,
    "demo": cmd_demo,
    "backlog": backlog_cli.dispatch,
    "tenants": tenants_cli.dispatch,
    "schedule": triggers_cli.schedule,
    "hooks": triggers_cli.hooks,
    "approvers": approvers_cli.dispatch,
    "standing": standing_cli.dispatch,
    "notifications": notifications_cli.dispatch,
    "serve": serve_cli.cmd_serve,
    "keys": serve_cli.cmd_keys,
    "eval": eval_cli.dispatch,
}
# Commands that need no stack, no settings and no event loop.
LOCAL: dict[str, Callable[[argparse.Namespace], int]] = {
    "completion": cmd_completion,
    "settings": cmd_settings,
    "sandbox": sandbox_cli.dispatch,
}


class Parser(argparse.ArgumentParser):
    """argparse, with its usage errors as one JSON object on stderr under `--json`."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if Parser.json_errors:
            print_error(2, "invalid_input", f"{self.prog}: {message}", as_json=True)
            self.exit(2)
        super().error(message)


def version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"agentledger {version('agentledger')}"
    except PackageNotFoundError:  # a checkout that was never installed
        return "agentledger (not installed)"


class VersionAction(argparse.Action):
    """`--version`, read from the package's metadata only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_text())
        parser.exit()


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="agentledger", description=(__doc__ or "").split("\n")[0])
    top.add_argument("--version", action=VersionAction)
    add_output_flags(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, *, wait: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
        add_output_flags(p)
        if wait:
            add_wait(p)
        return p

    for name, help in (("demo", "run a sample task end to end"), ("up", "run the stack")):
        p = command(name, help, wait=False)
        p.add_argument(
            "--port",
            type=int,
            help=f"Temporal frontend port (default {TEMPORAL_PORT}, or a free one if it is taken)",
        )
        p.add_argument(
            "--ui-port",
            type=int,
            help=f"Web UI port (default {WEB_UI_PORT}, or a free one if it is taken)",
        )
        if name == "up":
            p.add_argument("--no-worker", action="store_true", help="leave the worker out")
            add_tool_flags(p)
    p = command("start", "start a run; prints its id")
    p.add_argument("--task", help="what the agent should do")
    p.add_argument("--agent", help="the agent profile to run (its fields fill the spec)")
    p.add_argument(
        "--agents",
        help="where profiles live: a YAML file or PKG.MODULE:ATTR (default AGENTLEDGER_AGENTS, "
        f"else {DEMO_AGENTS})",
    )
    p.add_argument("--spec", help="a JSON or YAML run spec file (flags override it)")
    p.add_argument("--idempotency-key", help="starting again with it returns the same run")
    p.add_argument("--tenant", help="whose run: its fairness key, weight and limits")
    p.add_argument("--user", help="who the run is for, as shown with it (not who asks)")
    p.add_argument(
        "--priority",
        type=int,
        choices=range(1, 6),
        metavar="{1..5}",
        help="1 (runs first) to 5 (last); default 3, or the spec's",
    )
    add_double_texting(p, keyed=True)
    p = command("approve", "approve the pending action")
    add_run(p)
    add_decider(p)
    edits = p.add_mutually_exclusive_group()
    edits.add_argument(
        "--edit",
        help="a JSON Merge Patch of the arguments before running: the fields to change, a "
        "field set to null removed",
    )
    edits.add_argument("--arguments", help="the whole arguments to run with instead, as JSON")
    p = command("reject", "reject the pending action")
    add_run(p)
    add_decider(p)
    p.add_argument("--reason", required=True, help="why, kept in the receipt")
    for name, help in (
        ("pause", "pause at the next step boundary"),
        ("resume", "continue a paused run"),
        ("cancel", "end the run as cancelled, with its receipt"),
        ("status", "the state of a run: live, else as the mirror last saw it"),
        ("receipt", "what a run did, cost and changed"),
    ):
        p = command(name, help)
        add_run(p)
        add_tenant(p)
    p = command("say", "tell a run in flight something: it reads it at its next model call")
    add_run(p)
    p.add_argument("message", help="what the agent should know (a user message)")
    p.add_argument("--by", default="cli", help="who says it (shown in status and the receipt)")
    add_double_texting(p)
    add_tenant(p)
    chat_cli.add_parser(command)
    p = command("end", "end a session: it completes with its last answer and its receipt")
    add_run(p)
    p.add_argument("--by", default="cli", help="who ends it (shown in its events)")
    add_tenant(p)
    p = command("mirror", "compare a run's mirror with its history, or rebuild it")
    p.add_argument(
        "action",
        choices=["check", "rebuild"],
        help="check: list where the mirror and the history differ; rebuild: rewrite the "
        "mirror from the history",
    )
    add_run(p)
    p = command("watch", "follow a run live: steps, approvals, model text, receipt")
    add_run(p)
    p.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        help="start at this stream offset (an ended run: after this event seq)",
    )
    p = command("fork", "a new run from another's step N, optionally with an edited output")
    add_run(p)
    p.add_argument("--from-step", type=int, required=True, help="the step (its number) to fork at")
    p.add_argument(
        "--edit-output", help="JSON that stands for step N's tool output (N must be a tool step)"
    )
    p.add_argument("--key", help="idempotency key of the fork (default: from run, step, edit)")
    p = command(
        "deploy",
        "make a worker build current for new runs, once the open runs replay (`deploy check`)",
    )
    p.add_argument(
        "build_id",
        help="the AGENTLEDGER_BUILD_ID its workers were started with; `check`: replay every open "
        "run on the task queue against this code and report each (exit 1 if any fails); "
        "`patches`: the version branches left in the code and the open runs needing each; "
        "`status`: the builds, their open runs and which can be retired",
    )
    p.add_argument(
        "--closed", type=count, default=0, help="with check: also the N most recently closed"
    )
    p.add_argument(
        "--workflows",
        action="append",
        default=[],
        metavar="PKG.MODULE:ATTR",
        help="your own workflow classes your workers register beside the engine's",
    )
    p.add_argument(
        "--skip-check", action="store_true", help="make the build current without the replay"
    )
    p.add_argument(
        "--deployment", help="Worker Deployment name (default AGENTLEDGER_DEPLOYMENT_NAME)"
    )
    p.add_argument(
        "--eval",
        metavar="DATASET",
        help="with check: also replay this eval dataset to --candidate and gate on it "
        "(docs/evals.md); exit 1 if the replay fails, else 6 if the gate does",
    )
    eval_cli.add_candidate(p)
    eval_cli.add_gate(p)
    p = command("version", "the worker build a run is pinned to")
    add_run(p)
    p = command("list", "recent runs: the Postgres mirror's, and those no worker has taken yet")
    p.add_argument("--status", choices=STATUSES, help="only runs in this status")
    p.add_argument("--limit", type=count, default=50, help="at most this many (default 50)")
    p.add_argument(
        "--all",
        action="store_true",
        help="also the runs the engine starts for its own work: an eval's cases, sub-agents",
    )
    add_tenant(p)
    p = command("stats", "fleet figures: cost per completed run, failures, waits")
    p.add_argument("--since", help="only runs started since: an ISO date, or an age like 24h, 7d")
    add_tenant(p)
    p = command("costs", "what model calls cost, from the journal of what was paid")
    p.add_argument(
        "--by",
        help="sum by these, comma-separated: tenant, agent, model, key, day (default: one total)",
    )
    p.add_argument("--since", default="7d", help="an ISO date, or an age like 24h, 7d (default 7d)")
    p.add_argument("--csv", action="store_true", help="print CSV (a header line, then the rows)")
    add_tenant(p)
    p = command("prune", "delete what runs that finished long ago recorded")
    p.add_argument(
        "--older-than",
        help="finished longer ago than this (30d, 12h); default AGENTLEDGER_RETENTION_DAYS",
    )
    p.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    add_tenant(p)
    command("migrate", "bring the database's schema up to date (workers do it on start)")
    command("settings", "the settings in effect, secrets hidden", wait=False)
    backlog_cli.add_commands(sub)
    tenants_cli.add_commands(sub)
    triggers_cli.add_commands(sub)
    approvers_cli.add_commands(sub)
    standing_cli.add_commands(sub)
    notifications_cli.add_commands(sub)
    serve_cli.add_commands(sub)
    eval_cli.add_commands(sub)
    p = command("completion", "print a shell completion script (bash or zsh)", wait=False)
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    sandbox_cli.add_commands(sub)
    described(top)
    return top


def described(parser: argparse.ArgumentParser) -> None:
    """Every command's `--help` opens with what it does: its one-line help where it was given
    no description of its own (a group's, such as `keys` or `eval`, too)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for listed in action._choices_actions:
                command = action.choices[listed.dest]
                command.description = command.description or listed.help
                described(command)


async def dispatch(args: argparse.Namespace, began: float) -> int:
    """Run the command; its `--wait` counts from `began` (importing the client takes a second)."""
    from agentledger import RunClient
    from agentledger.core.config import AgentLedgerConfig, process_environment
    from agentledger.core.log_setup import configure_logging

    # Under --json, stderr carries one JSON object (an error), not a library's warnings (a
    # pool retrying its connection) nor the settings' (an unknown variable), unless
    # --log-level asks for them.
    if getattr(args, "json", False):
        configure_logging(args.log_level or "CRITICAL")
    settings = AgentLedgerConfig.load()
    if runs_an_eval(args):  # its LLM judges call their providers, with the keys read here
        settings = settings.with_provider_keys(process_environment())
    quiet = "CRITICAL" if getattr(args, "json", False) else settings.log_level
    configure_logging(args.log_level or quiet, settings.log_format)
    async with RunClient.lazy(settings, wait=getattr(args, "wait", None), began=began) as client:
        acting = getattr(args, "acting_tenant", None)
        return await COMMANDS[args.command](client.acting_for(acting) if acting else client, args)


def runs_an_eval(args: argparse.Namespace) -> bool:
    """`eval run`, or `deploy check --eval`."""
    if args.command == "eval":
        return bool(args.eval_command == "run")
    return args.command == "deploy" and bool(getattr(args, "eval", None))


def print_error(code: int, kind: str, message: str, *, as_json: bool) -> None:
    if as_json:
        error = {"code": code, "kind": kind, "message": message}
        print(json.dumps({"error": error}), file=sys.stderr)
    else:
        print(f"error: {message}", file=sys.stderr)


def exit_code(err: BaseException, as_json: bool) -> int:
    """Say what went wrong on stderr; the exit code that class of failure has."""
    from agentledger.cli.interrupts import Interrupted
    from agentledger.core.errors import AgentLedgerError

    if isinstance(err, Interrupted):  # what the Ctrl-C left behind, in one line
        if as_json:
            print_error(err.exit_code, "interrupted", str(err), as_json=True)
        else:
            print(err, file=sys.stderr, flush=True)
        return err.exit_code
    if isinstance(err, ImportError):
        from agentledger.core.extras import missing_extra

        err = missing_extra(err) or err
    from agentledger.core.errors import sealed_payload

    err = sealed_payload(err) or err  # a payload sealed by a codec of the user's, not given
    if isinstance(err, AgentLedgerError):
        print_error(err.exit_code, err.kind, str(err), as_json=as_json)
        return err.exit_code
    if unreachable(err):
        print_error(4, "unreachable", f"{type(err).__name__}: {err}", as_json=as_json)
        return 4
    if as_json:  # a bug: still one JSON object, with what a report of it needs
        print_error(1, "failure", f"{type(err).__name__}: {err}", as_json=True)
    else:
        import traceback

        traceback.print_exception(err)
    return 1


def unreachable(err: BaseException) -> bool:
    """A connection Temporal or Postgres dropped under a command (not a setting's fault)."""
    rpc = sys.modules.get("temporalio.service")
    psycopg = sys.modules.get("psycopg")
    if rpc is not None and isinstance(err, rpc.RPCError):
        return err.status in (rpc.RPCStatusCode.UNAVAILABLE, rpc.RPCStatusCode.DEADLINE_EXCEEDED)
    return psycopg is not None and isinstance(err, psycopg.OperationalError)


def main(argv: list[str] | None = None) -> int:
    began = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    as_json = "--json" in argv
    Parser.json_errors = as_json
    try:
        args = parser().parse_args(argv)
        if args.command in LOCAL:
            return LOCAL[args.command](args)
        if args.command in ("up", "demo"):
            # A Ctrl-C before the command takes the signal on its loop (while it imports
            # what it runs) ends it at once, not at its first await (asyncio.run's way).
            import signal

            signal.signal(signal.SIGINT, interrupt_now)
        import asyncio

        return asyncio.run(dispatch(args, began))
    except SystemExit as done:  # argparse: --help, --version, a usage error
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:  # a reader that stopped reading (`| head`): end quietly
        closed_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a pipeline's writer
    except Exception as err:
        return exit_code(err, as_json)


def interrupt_now(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


def closed_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush meets no closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def console() -> NoReturn:
    """`agentledger ...`, and the `agentledger ...` console script (pyproject.toml)."""
    code = main()
    # Spans still batched: flushed only if this command loaded tracing at all.
    telemetry = sys.modules.get("agentledger.temporal.telemetry")
    if telemetry is not None:
        telemetry.shutdown_tracing()
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
