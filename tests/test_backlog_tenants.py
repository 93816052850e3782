"""One door for the backlog commands: a backlog is an agent's, and may hold tasks
of several tenants. Under a tenant, `backlog list` and `dead` show its tasks alone, a backlog
with none of them reads as a missing one, another tenant's task as a missing task, and
`stop`, `resume` and a tenant's policy act on the caller's tasks alone: other
tenants' tasks go on. An operator (no AGENTLEDGER_TENANT) sees and acts on the whole backlog."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import InvalidRequest, OperationError
from tests.backlog_support import FAST_TIMEOUTS, end_backlog, item, new_agent, tasks, wait_states
from tests.test_cli import Result
from tests.test_door import cli

NEVER_PASSES = {"required_sections": ["## Never there"], "max_rounds": 1}


def plan(path: Path, *keys: str) -> str:
    """A backlog file: each key a quick task; a key starting with "poison" fails, once."""
    items: list[dict[str, Any]] = []
    for key in keys:
        spec: dict[str, Any] = {
            "task": f"Summarize the order policy ({key}).",
            "allowed_tools": ["search_notes"],
            "timeouts": FAST_TIMEOUTS,
        }
        if key.startswith("poison"):
            spec["verify"] = NEVER_PASSES
        items.append({"title": key, "idempotency_key": key, "spec": spec, "max_attempts": 1})
    path.write_text(json.dumps(items))
    return str(path)


def same_refusal(found: Result, missing: Result, found_name: str, missing_name: str) -> None:
    """Two refusals that read alike once the name asked for is put aside."""
    assert found.code == missing.code, (found, missing)
    assert found.out == missing.out == "", (found, missing)
    assert found.err.replace(found_name, "X") == missing.err.replace(missing_name, "X")


@pytest.mark.timeout(400)
async def test_backlog_commands_apply_the_callers_tenant(
    client, settings: AgentLedgerConfig, pool, worker, tmp_path
):
    mark = uuid.uuid4().hex[:8]
    acme, globex, initech = f"acme-{mark}", f"globex-{mark}", f"initech-{mark}"
    shared, solo, nobody = new_agent("shared"), new_agent("solo"), new_agent("nobody")
    some_at_once = asyncio.Semaphore(4)  # each is a process of its own; the machine is shared

    async def as_(tenant: str | None, *args: str) -> Result:
        async with some_at_once:
            return await cli(settings, tmp_path, tenant, "backlog", *args)

    try:
        async with worker():
            enqueued = await asyncio.gather(
                as_(acme, "enqueue", "--agent", shared, "--retry-delay", "0",
                    plan(tmp_path / "a.json", "a-ok", "poison-a")),
                as_(globex, "enqueue", "--agent", shared, "--retry-delay", "0",
                    plan(tmp_path / "g.json", "g-ok", "poison-g")),
                as_(acme, "enqueue", "--agent", solo, plan(tmp_path / "s.json", "s-ok")),
            )  # fmt: skip
            assert all(r.code == 0 for r in enqueued), enqueued
            await wait_states(
                pool,
                shared,
                {"a-ok": "done", "poison-a": "failed", "g-ok": "done", "poison-g": "failed"},
                seconds=120,
            )
            await wait_states(pool, solo, {"s-ok": "done"}, seconds=60)

            # Each tenant's list and dead letters hold its own tasks alone; an operator's all.
            lists = await asyncio.gather(
                *(as_(t, "list", "--agent", shared, "--json") for t in (acme, globex, None)),
                *(as_(t, "dead", "--agent", shared, "--json") for t in (acme, globex)),
            )
            assert all(r.code == 0 for r in lists), lists
            keys = [sorted(t["task_key"] for t in r.json()["tasks"]) for r in lists[:3]]
            assert keys == [
                ["a-ok", "poison-a"],
                ["g-ok", "poison-g"],
                ["a-ok", "g-ok", "poison-a", "poison-g"],
            ]
            assert [[t["task_key"] for t in r.json()] for r in lists[3:]] == [
                ["poison-a"],
                ["poison-g"],
            ]

            # Another tenant's task reads as a key the backlog does not hold; nothing changes.
            foreign, absent = await asyncio.gather(
                as_(acme, "retry", "--agent", shared, "poison-g"),
                as_(acme, "retry", "--agent", shared, "never-enqueued"),
            )
            assert foreign.code != 0 and "no task" in foreign.err, foreign
            same_refusal(foreign, absent, "poison-g", "never-enqueued")
            states = {t["task_key"]: t["state"] for t in await tasks(pool, shared)}
            assert states["poison-g"] == "failed", "another tenant's retry changed nothing"

            # A tenant's stop and resume act on its own tasks; an operator's on every task.
            part = await as_(acme, "stop", "--agent", shared, "--json")
            assert part.code == 0 and part.json()["stopped"], part
            assert acme in part.json()["message"], part
            listing = await as_(None, "list", "--agent", shared, "--json")
            assert listing.json()["status"] == "active", "acme's stop stopped acme's alone"
            foreign = await as_(globex, "resume", "--agent", shared)
            assert foreign.code != 0 and "not stopped" in foreign.err, foreign
            part = await as_(acme, "resume", "--agent", shared, "--json")
            assert part.code == 0 and not part.json()["stopped"], part
            for tenant, agent in ((None, shared), (acme, solo)):
                stopped = await as_(tenant, "stop", "--agent", agent, "--json")
                assert stopped.code == 0 and stopped.json()["stopped"], stopped
                resumed = await as_(tenant, "resume", "--agent", agent, "--json")
                assert resumed.code == 0 and not resumed.json()["stopped"], resumed
            own = await as_(acme, "retry", "--agent", shared, "poison-a", "--json")
            assert own.code == 0 and own.json()["key"] == "poison-a", own

            # A tenant with no task in a backlog sees no backlog, as for an agent without one.
            for command in (("list",), ("dead",), ("stop",), ("resume",), ("retry", "g-ok")):
                there, missing = await asyncio.gather(
                    as_(initech, command[0], "--agent", shared, *command[1:]),
                    as_(initech, command[0], "--agent", nobody, *command[1:]),
                )
                assert there.code == 3, (command, there)
                same_refusal(there, missing, shared, nobody)
                operator = await as_(None, command[0], "--agent", nobody, *command[1:])
                assert operator.code == 3
                assert operator.err.replace(nobody, "X") == there.err.replace(shared, "X")
    finally:
        for agent in (shared, solo):
            await end_backlog(client, agent)


async def test_a_tenants_stop_leaves_a_task_the_mirror_has_not_shown_yet(
    client, settings: AgentLedgerConfig, pool, worker
):
    """The mirror trails the backlog: a task another tenant enqueued a moment ago may not be
    in it yet. A tenant's stop is applied by the backlog to that tenant's tasks alone, so
    the other tenant's tasks go on whatever the mirror showed."""
    mark = uuid.uuid4().hex[:8]
    acme, globex = f"acme-{mark}", f"globex-{mark}"
    agent = new_agent("lag")
    as_acme = RunClient(client, settings.model_copy(update={"tenant": acme}))
    as_globex = RunClient(client, settings.model_copy(update={"tenant": globex}))
    try:
        async with worker():
            await as_acme.backlogs.enqueue(agent, [item("a-1")])
            await as_globex.backlogs.enqueue(agent, [item("g-1")])
            await wait_states(pool, agent, {"a-1": "done", "g-1": "done"}, seconds=60)
            await as_globex.backlogs.enqueue(
                agent, [item("g-2", max_attempts=1, verify=NEVER_PASSES)]
            )
            # As if the mirror had not been written since globex's second enqueue.
            async with pool.connection() as conn:
                await conn.execute(
                    "DELETE FROM backlog_tasks WHERE agent = %s AND task_key LIKE 'g-%%'", (agent,)
                )
            stopped = await as_acme.backlogs.stop(agent)
            assert stopped.stopped and acme in stopped.message, stopped
            await as_globex.backlogs.enqueue(agent, [item("g-3")])
            await wait_states(pool, agent, {"g-3": "done"}, seconds=60)
            with pytest.raises(OperationError, match="already stopped"):
                await as_acme.backlogs.stop(agent)
            await as_acme.backlogs.enqueue(agent, [item("a-2")])
            await wait_states(pool, agent, {"a-2": "todo"}, seconds=60)
            await as_acme.backlogs.resume(agent)
            await wait_states(pool, agent, {"a-2": "done"}, seconds=60)
            listing = await RunClient(client, settings).backlogs.tasks(agent)
            assert listing.status == "active", "the backlog as a whole never stopped"
    finally:
        await as_acme.close()
        await as_globex.close()
        await end_backlog(client, agent)


@pytest.mark.timeout(300)
async def test_a_tenants_policy_and_poison_stop_only_its_own_tasks(
    client, settings: AgentLedgerConfig, pool, worker
):
    """Acme's policy (one attempt, stop on poison) and a failing task of its own
    stop acme's part of a shared backlog alone: globex's tasks, behind acme's in order, keep
    their own attempts and finish; acme resumes and retries its own part though globex's
    tasks are there too."""
    from agentledger.core.backlog_models import PolicyPatch

    mark = uuid.uuid4().hex[:8]
    acme, globex = f"acme-{mark}", f"globex-{mark}"
    agent = new_agent("isolated")
    as_acme = RunClient(client, settings.model_copy(update={"tenant": acme}))
    as_globex = RunClient(client, settings.model_copy(update={"tenant": globex}))
    strict = PolicyPatch(max_attempts=1, on_poison="stop", retry_delay_seconds=0)
    try:
        async with worker():
            await as_acme.backlogs.enqueue(
                agent, [item("a-poison", verify=NEVER_PASSES), item("a-next")], policy=strict
            )
            await as_globex.backlogs.enqueue(agent, [item("g-1"), item("g-2")])
            await wait_states(
                pool,
                agent,
                {"a-poison": "failed", "a-next": "todo", "g-1": "done", "g-2": "done"},
                seconds=120,
            )
            limits = {t["task_key"]: t["max_attempts"] for t in await all_tasks(as_globex, agent)}
            assert limits == {"g-1": 3, "g-2": 3}, "acme's policy is not globex's"
            listing = await RunClient(client, settings).backlogs.tasks(agent)
            assert listing.status == "active", "the backlog as a whole goes on"

            resumed = await as_acme.backlogs.resume(agent)
            assert not resumed.stopped, resumed
            # How many tasks run at once is the whole backlog's: not a tenant's to set.
            with pytest.raises(InvalidRequest, match="parallelism bound the whole backlog"):
                await as_acme.backlogs.enqueue(
                    agent, [item("a-x")], policy=PolicyPatch(parallelism=4)
                )
            assert "a-x" not in {t["task_key"] for t in await all_tasks(as_acme, agent)}
            await wait_states(pool, agent, {"a-next": "done"}, seconds=60)
            retried = await as_acme.backlogs.retry(agent, "a-poison")
            assert retried.key == "a-poison"
            await wait_states(pool, agent, {"a-poison": "failed"}, seconds=60)
            # The stop is acme's again; globex's next task still runs.
            await as_globex.backlogs.enqueue(agent, [item("g-3")])
            await wait_states(pool, agent, {"g-3": "done"}, seconds=60)
    finally:
        await as_acme.close()
        await as_globex.close()
        await end_backlog(client, agent)


async def all_tasks(run_client: RunClient, agent: str) -> list[dict[str, Any]]:
    return [task.model_dump() for task in (await run_client.backlogs.tasks(agent)).tasks]
