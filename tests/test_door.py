"""One door for every tenant: each way in applies the tenant's stored policy, and
each way to act on a run applies the caller's tenant. Each test here is one of the holes the
issue found on main, tried the way a hostile tenant would."""

from __future__ import annotations

import ast
import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio.api.enums.v1 import EventType

from agentledger import RunClient
from agentledger.client import admission as admission_ops
from agentledger.client import approver_keys
from agentledger.core.admission_models import AdmitInput, TenantLimits
from agentledger.core.backlog_models import AGENT_PATTERN, child_run_id
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import SIGNAL_RUN_ADMIT
from agentledger.core.errors import OperationError, SetupError
from agentledger.core.keys import id_part
from agentledger.store.approver_store import ApproverStore
from agentledger.store.tenant_store import TenantStore
from agentledger.workflows.admission import admission_id
from agentledger.workflows.changes import for_new_run
from tests import client_ops as door
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests.support import eventually, make_spec, parse_python, rows, wait_pending, wait_status
from tests.test_cli import ROOT, Result, cli_env

PACKAGE = ROOT / "agentledger"


@pytest.fixture
def tenants() -> tuple[str, str]:
    mark = uuid.uuid4().hex[:8]
    return f"acme-{mark}", f"globex-{mark}"


async def cli(settings: AgentLedgerConfig, home: Path, tenant: str | None, *args: str) -> Result:
    """`agentledger ARGS` in its own process, acting for `tenant` (AGENTLEDGER_TENANT)."""
    env = cli_env(settings, home)
    env.pop("AGENTLEDGER_TENANT", None)
    if tenant is not None:
        env["AGENTLEDGER_TENANT"] = tenant
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


# ---------------------------------------------------------------- the door's shape


def calls_of(name: str, on: tuple[str, ...] = ()) -> list[Path]:
    """The modules of the package that call a function called `name` (with `on`, only as
    an attribute of one of those names, such as a module imported as `ops`)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = parse_python(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
                if called == name and (not on or owner in on):
                    found.append(path.relative_to(ROOT))
                    break
    return found


def test_only_the_door_starts_runs():
    """Every path (CLI, RunClient, fork, demo) reaches the engine's start through the door;
    the capped path (the admission queue) only from the engine's start."""
    # (A workflow starts its children through agentledger/workflows/run_starts.py.)
    client_side = [p for p in calls_of("start_run") if p.parts[1] != "workflows"]
    assert client_side == [Path("agentledger/client/starts.py")]
    assert calls_of("enqueue_run") == [Path("agentledger/client/starts.py")]
    # The CLI's `start` and `demo` go through `client.runs`, which, as forks do, goes through
    # the gate; an eval's cases are child runs (`run_agent`, which reads the tenant's policy);
    # a webhook's delivery starts its run through the gate, as the hook (a runner); a
    # schedule's fires are child runs of its fire workflow (run_starts.read_policy).
    assert calls_of("start", on=("starts",)) == [
        Path("agentledger/client/forks.py"),
        Path("agentledger/client/hooks.py"),
        Path("agentledger/client/runs.py"),
    ]


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)


@given(st.tuples(names, names), st.tuples(names, names), st.sampled_from(["start", "fork"]))
def test_run_ids_are_scoped_by_tenant(a: tuple[str, str], b: tuple[str, str], origin: Any):
    """Distinct (tenant, key) pairs never share an id; no direct start takes a fork's id."""
    if a != b:
        assert door.run_id(*a, origin=origin) != door.run_id(*b, origin=origin)
    assert not door.run_id(*a).startswith(door.ENGINE_ID_PREFIX)
    assert door.run_id(*a, origin="fork").startswith(door.ENGINE_ID_PREFIX)
    if not door.BACKLOG_RUN.fullmatch(id_part(a[1])):
        assert door.run_id("default", a[1]) == ops.run_id_for(a[1]), "single-user ids stay"


@given(
    st.from_regex(AGENT_PATTERN, fullmatch=True),
    names,
    st.integers(1, 20),
    names,
    st.sampled_from(["default", "acme"]),
)
def test_no_direct_start_takes_a_backlog_runs_id(
    agent: str, task: str, launch: int, key: str, tenant: str
):
    """`run-<agent>.<key>.<n>` could be taken first by a direct start with that
    key; now every key in every tenant, the backlog's own included, names another id."""
    taken = child_run_id(agent, task, launch)
    assert door.run_id(tenant, key) != taken
    assert door.run_id(tenant, taken.removeprefix("run-")) != taken


# ---------------------------------------------------------------- starts


async def test_the_same_key_in_two_tenants_starts_two_runs(
    client, settings, pool, tmp_path, tenants
):
    acme, globex = tenants
    key = f"k-{uuid.uuid4().hex[:8]}"
    start = ("start", "--task", "Say hi.", "--idempotency-key", key, "--json")
    theirs = await cli(settings, tmp_path, acme, *start)
    ours = await cli(settings, tmp_path, globex, *start)
    assert theirs.code == 0 and ours.code == 0, theirs.err + ours.err
    assert theirs.json()["run_id"] != ours.json()["run_id"]
    assert not ours.json()["existing"], "B's run starts, and B learns nothing of A's key"
    again = await cli(settings, tmp_path, globex, *start)
    assert again.json() == {**ours.json(), "existing": True}
    for started in (theirs, ours):
        await ops.cancel(client, started.json()["run_id"])


async def test_a_start_without_a_database_is_refused(client, settings):
    run_client = RunClient(client, settings.model_copy(update={"database_url": None}))
    with pytest.raises(SetupError, match="no database is configured"):
        await run_client.runs.start("Say hi.", idempotency_key=f"k-{uuid.uuid4().hex[:8]}")


async def test_a_spec_adds_approvers_and_never_removes_the_tenants(
    client, settings, pool, worker, tenants, tmp_path
):
    """Whoever starts a run does not choose who approves it: the tenant's keyed approver
    stays, and an unsigned "mallory" approves nothing."""
    acme, _ = tenants
    ana = approver_keys.create(tmp_path, "ana", "approver", acme)
    assert await ApproverStore(pool).add(ana.signer)
    mallory = approver_keys.create(tmp_path / "m", "mallory", "approver", acme)
    spec_fields: dict[str, Any] = {"approval": {"signers": [mallory.signer.model_dump()]}}
    run_client = RunClient(client, settings.model_copy(update={"tenant": acme}))
    try:
        async with worker():
            run_id = (
                await run_client.runs.start(make_spec(tenant=acme).task, **spec_fields)
            ).run_id
            await wait_pending(client, run_id)
            carried = (await fork_ops.parent_input(client, run_id)).approval.signers
            assert {s.key_id for s in carried} == {ana.signer.key_id, mallory.signer.key_id}
            with pytest.raises(OperationError, match="only signed decisions"):
                await ops.approve(client, run_id, by="mallory", role="approver", tenant=acme)
            await ops.cancel(client, run_id)
    finally:
        await run_client.close()


# ---------------------------------------------------------------- another tenant's runs


@pytest.mark.timeout(600)
async def test_a_foreign_run_reads_as_a_missing_one_on_every_command(
    client, settings, pool, tenants, tmp_path
):
    """Same message, same exit code, nothing printed, nothing changed: for each command of
    the CLI that names a run, and for the operations under the rest."""
    acme, globex = tenants
    theirs = await door.start(
        client, pool, make_spec(tenant=acme), task_queue=settings.task_queue, acting_tenant=acme
    )
    missing = f"run-{globex}~nothing-{uuid.uuid4().hex[:6]}"
    commands = [
        ("status", "{}"),
        ("receipt", "{}"),
        ("watch", "{}"),
        ("fork", "{}", "--from-step", "1"),
        ("version", "{}"),
        ("mirror", "check", "{}"),
        ("approve", "{}", "--by", "li", "--role", "approver"),
        ("cancel", "{}"),
    ]
    some_at_once = asyncio.Semaphore(4)  # each is a process of its own; the machine is shared

    async def run(command: tuple[str, ...], run_id: str) -> Result:
        async with some_at_once:
            return await cli(settings, tmp_path, globex, *(a.format(run_id) for a in command))

    results = await asyncio.gather(*(run(c, r) for c in commands for r in (theirs.run_id, missing)))
    for i, command in enumerate(commands):
        foreign, absent = results[2 * i], results[2 * i + 1]
        assert foreign.code == absent.code == 3, (command, foreign, absent)
        assert foreign.out == absent.out == "", command
        assert foreign.err.replace(theirs.run_id, "X") == absent.err.replace(missing, "X"), command
    for operation in (
        lambda run_id: ops.reject(
            client, run_id, by="li", role="approver", reason="x", tenant=globex, mirror=pool
        ),
        lambda run_id: ops.control(client, run_id, "pause", tenant=globex, mirror=pool),
        lambda run_id: ops.control(client, run_id, "resume", tenant=globex, mirror=pool),
        lambda run_id: ops.rebuild_mirror(client, pool, run_id, tenant=globex),
        lambda run_id: ops.pending_approval(client, run_id, tenant=globex, mirror=pool),
    ):
        refusals = []
        for run_id in (theirs.run_id, missing):
            with pytest.raises(OperationError) as refused:
                await operation(run_id)
            refusals.append(str(refused.value).replace(run_id, "X"))
        assert refusals[0] == refusals[1]
    assert not await rows(pool, "SELECT 1 FROM run_forks WHERE parent_run_id = %s", theirs.run_id)
    history = [
        e.event_type async for e in client.get_workflow_handle(theirs.run_id).fetch_history_events()
    ]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED not in history
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in history, "nothing was changed"
    await ops.cancel(client, theirs.run_id)


async def test_the_python_client_cannot_watch_or_fork_another_tenants_run(
    client, settings, pool, worker, tenants
):
    acme, globex = tenants
    run_client = RunClient(client, settings.model_copy(update={"tenant": globex}))
    try:
        async with worker():
            theirs = await door.start(
                client,
                pool,
                make_spec(tenant=acme),
                task_queue=settings.task_queue,
                acting_tenant=acme,
            )
            await wait_pending(client, theirs.run_id)
            refused = str(ops.no_run(theirs.run_id))
            with pytest.raises(OperationError) as watched:
                await anext(run_client.runs.watch(theirs.run_id))
            assert str(watched.value) == refused
            with pytest.raises(OperationError) as forked:
                await run_client.runs.fork(theirs.run_id, from_step=1)
            assert str(forked.value) == refused
            with pytest.raises(OperationError) as waited:
                await run_client.runs.result(theirs.run_id)
            assert str(waited.value) == refused
            await ops.cancel(client, theirs.run_id)
    finally:
        await run_client.close()


# ---------------------------------------------------------------- caps


async def test_every_start_path_takes_the_tenants_cap(client, settings, pool, worker, tenants):
    """RunClient starts and forks wait behind the stored cap; a capped run can be forked."""
    acme, _ = tenants
    await TenantStore(pool).save(TenantLimits(tenant=acme, max_in_flight=1, weight=2))
    run_client = RunClient(client, settings.model_copy(update={"tenant": acme}))
    try:
        async with worker():
            first = (await run_client.runs.start(make_spec(tenant=acme).task)).run_id
            await wait_pending(client, first)
            second = (await run_client.runs.start(make_spec(tenant=acme).task)).run_id
            assert (await ops.status(client, second)).status.value == "queued"
            fork = (await run_client.runs.fork(first, from_step=1)).run_id
            assert fork.startswith(door.ENGINE_ID_PREFIX)
            forked = await ops.status(client, fork)
            assert forked.status.value == "queued" and forked.tenant == acme
            handle = client.get_workflow_handle(fork)
            assert (
                await handle.describe()
            ).raw_description.workflow_execution_info.priority.fairness_weight == 2
            for run_id in (second, fork, first):
                await ops.cancel(client, run_id)
    finally:
        await run_client.close()


async def test_the_queue_keeps_the_stored_limits_and_gives_only_its_own_slots(
    client, settings, pool, worker, tenants
):
    """A caller's stale limits do not reset the cap; an admit from another sender admits
    nothing."""
    acme, _ = tenants
    limits = TenantLimits(tenant=acme, max_in_flight=1)
    await TenantStore(pool).save(limits)

    async def start() -> str:
        started = await door.start(
            client,
            pool,
            make_spec(tenant=acme),
            task_queue=settings.task_queue,
            acting_tenant=acme,
        )
        return started.run_id

    async with worker():
        first = await start()
        await wait_pending(client, first)
        second = await start()
        stale = make_spec(tenant=acme)
        third = door.run_id(acme, stale.idempotency_key)
        await admission_ops.enqueue_run(
            client,
            third,
            for_new_run(stale),
            task_queue=settings.task_queue,
            indexed=True,
            limits=TenantLimits(tenant=acme, max_in_flight=5),
        )
        handle = client.get_workflow_handle(second)
        await handle.signal(SIGNAL_RUN_ADMIT, AdmitInput(admission_id="admission-mallory"))

        async def signal_applied() -> bool:
            events = [e async for e in handle.fetch_history_events()]
            signalled = max(
                (
                    i
                    for i, e in enumerate(events)
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                ),
                default=None,
            )
            # A signal that comes while a workflow task runs is written after that task.
            return signalled is not None and any(
                e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                for e in events[signalled:]
            )

        await eventually(signal_applied, what="the forged admit to be applied")
        await asyncio.sleep(1)  # the queue had its chance to admit the others too
        for run_id in (second, third):
            assert (await ops.status(client, run_id)).status.value == "queued", run_id
        place = await admission_ops.position(client, admission_id(acme), second)
        assert place is not None and place.max_in_flight == 1
        for run_id in (first, second, third):
            await ops.cancel(client, run_id)
        await wait_status(client, first, "cancelled")


# ---------------------------------------------------------------- approvers


async def test_approvers_belong_to_a_tenant(settings, pool, tenants, tmp_path):
    acme, globex = tenants
    home = tmp_path / "home"
    name = f"ana-{uuid.uuid4().hex[:6]}"

    async def approvers(tenant: str | None, *args: str, config: str = "a") -> Result:
        os.environ["AGENTLEDGER_CONFIG_DIR"] = str(tmp_path / config)
        try:
            return await cli(settings, home, tenant, "approvers", *args)
        finally:
            os.environ.pop("AGENTLEDGER_CONFIG_DIR")

    added = await approvers(acme, "add", name, "--role", "approver", "--json")
    assert added.code == 0, added.err
    assert added.json()["tenant"] == acme, "under a tenant, for that tenant only"
    again = await approvers(acme, "add", name, "--role", "approver", config="b")
    assert again.code == 5 and "already registered" in again.err
    assert not (tmp_path / "b" / "approvers" / f"{name}.pem").exists()
    replaced = await approvers(acme, "add", name, "--role", "approver", "--replace", config="b")
    assert replaced.code == 5 and "operator" in replaced.err
    unscoped = await approvers(None, "add", f"{name}-x", "--role", "approver")
    assert unscoped.code == 2 and "--any-tenant" in unscoped.err
    widened = await approvers(acme, "add", f"{name}-y", "--role", "approver", "--any-tenant")
    assert widened.code == 5
    listed = await approvers(globex, "list", "--json")
    assert listed.code == 0 and listed.json() == []
    own = await approvers(acme, "list", "--json")
    assert [a["name"] for a in own.json()] == [name]
    operator = await approvers(
        None,
        "add",
        name,
        "--role",
        "approver",
        "--tenant",
        acme,
        "--replace",
        "--json",
        config="c",
    )
    assert operator.code == 0, operator.err
    [kept] = await ApproverStore(pool).registered_for(acme)
    assert kept.key_id == operator.json()["key_id"], "the operator replaced the key on purpose"


# ---------------------------------------------------------------- backlogs


async def test_backlog_runs_carry_their_tenants_approvers(
    client, settings, pool, worker, tenants, tmp_path
):
    """An unsigned "mallory" cannot approve a backlog run of a tenant with a keyed approver;
    a task for another tenant is refused (a capped tenant's backlog runs wait in its queue:
    tests/test_door_children.py)."""
    acme, globex = tenants
    ana = approver_keys.create(tmp_path, "ana", "approver", acme)
    assert await ApproverStore(pool).add(ana.signer)
    agent = f"desk-{uuid.uuid4().hex[:8]}"
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "- title: notify\n  idempotency_key: notify-1\n"
        f"  spec: {{task: {make_spec().task!r}, timeouts: {{heartbeat_seconds: 5}}}}\n"
    )
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text(
        f"- title: x\n  idempotency_key: x-1\n  spec: {{task: x, tenant: {globex}}}\n"
    )
    async with worker():
        refused = await cli(
            settings, tmp_path, acme, "backlog", "enqueue", "--agent", agent, str(foreign)
        )
        assert refused.code == 5 and "acts for tenant" in refused.err
        added = await cli(
            settings, tmp_path, acme, "backlog", "enqueue", "--agent", agent, str(plan)
        )
        assert added.code == 0, added.err

        async def child() -> str | None:
            found = await rows(
                pool,
                "SELECT run_id FROM backlog_tasks WHERE agent = %s AND run_id IS NOT NULL",
                agent,
            )
            return found[0]["run_id"] if found else None

        run_id = await eventually(child, what="the backlog's run")
        await wait_pending(client, run_id)
        carried = (await fork_ops.parent_input(client, run_id)).approval.signers
        assert ana.signer.key_id in {s.key_id for s in carried}
        assert (await ops.status(client, run_id)).tenant == acme
        with pytest.raises(OperationError, match="only signed decisions"):
            await ops.approve(client, run_id, by="mallory", role="approver")
        await client.get_workflow_handle(f"backlog-{agent}").terminate("test over")


async def test_a_tenant_neither_sets_nor_sees_other_tenants_limits(
    settings, pool, tenants, tmp_path
):
    """Its cap and weight are the policy the door enforces: `tenants set` is an operator's."""
    acme, globex = tenants
    await TenantStore(pool).save(TenantLimits(tenant=acme, max_in_flight=1))
    await TenantStore(pool).save(TenantLimits(tenant=globex, weight=3))
    lifted = await cli(settings, tmp_path, acme, "tenants", "set", acme, "--max-in-flight", "off")
    assert lifted.code == 5 and "operator" in lifted.err
    assert (await TenantStore(pool).limits(acme)).max_in_flight == 1
    listed = await cli(settings, tmp_path, acme, "tenants", "list", "--json")
    assert listed.code == 0 and [r["tenant"] for r in listed.json()] == [acme]
