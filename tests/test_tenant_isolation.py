"""A client acting for one tenant cannot see or touch another tenant's runs: each read and
each write refuses, and another tenant's run looks exactly like a missing one."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agentledger import RunClient
from agentledger.core.errors import OperationError
from agentledger.store import metrics
from tests import client_ops as door
from tests import client_ops as ops
from tests.support import make_spec, wait_pending
from tests.test_cli import run_cli


@pytest.fixture
def tenants() -> tuple[str, str]:
    mark = uuid.uuid4().hex[:8]
    return f"acme-{mark}", f"globex-{mark}"


async def test_every_read_and_write_refuses_another_tenants_run(
    client, settings, pool, worker, tenants
):
    acme, globex = tenants
    async with worker():
        theirs = await ops.start_run(client, make_spec(tenant=acme), task_queue=settings.task_queue)
        ours = await ops.start_run(client, make_spec(tenant=globex), task_queue=settings.task_queue)
        await wait_pending(client, theirs.run_id)
        await wait_pending(client, ours.run_id)
        hidden = str(ops.no_run(theirs.run_id))

        refusals = {
            "status": lambda: ops.inspect(client, theirs.run_id, tenant=globex, mirror=pool),
            "status (live)": lambda: ops.status(client, theirs.run_id, tenant=globex),
            "receipt": lambda: ops.receipt(pool, theirs.run_id, tenant=globex),
            "approve": lambda: ops.approve(
                client, theirs.run_id, by="li", role="approver", tenant=globex
            ),
            "reject": lambda: ops.reject(
                client, theirs.run_id, by="li", role="approver", reason="x", tenant=globex
            ),
            "pause": lambda: ops.control(client, theirs.run_id, "pause", tenant=globex),
            "resume": lambda: ops.control(client, theirs.run_id, "resume", tenant=globex),
            "cancel": lambda: ops.cancel(client, theirs.run_id, tenant=globex),
        }
        before = await ops.status(client, theirs.run_id)
        for name, call in refusals.items():
            with pytest.raises(OperationError) as refused:
                await call()
            assert str(refused.value) == hidden, name
        with pytest.raises(OperationError, match=f"acts for tenant '{globex}'"):
            await door.start(
                client,
                pool,
                make_spec(tenant=acme),
                task_queue=settings.task_queue,
                acting_tenant=globex,
            )
        assert await ops.status(client, theirs.run_id) == before, "nothing was touched"

        # The Python client with AGENTLEDGER_TENANT set goes through the same checks.
        python_client = RunClient(client, settings.model_copy(update={"tenant": globex}))
        for call in (
            lambda: python_client.runs.status(theirs.run_id),
            lambda: python_client.runs.approve(theirs.run_id, by="li", role="approver"),
            lambda: python_client.runs.reject(theirs.run_id, by="li", reason="x", role="approver"),
            lambda: python_client.runs.receipt(theirs.run_id),
        ):
            with pytest.raises(OperationError) as refused:
                await call()
            assert str(refused.value) == hidden
        with pytest.raises(OperationError, match=f"tenant '{globex}'"):
            await python_client.runs.start("x", tenant=acme)
        await python_client.close()

        listed = await ops.list_runs(pool, tenant=globex)
        assert [r["run_id"] for r in listed] == [ours.run_id]
        figures = await metrics.stats(pool, tenant=globex)
        assert figures.runs_started == 1
        report = await ops.inspect(client, ours.run_id, tenant=globex, mirror=pool)
        assert report.state.tenant == globex
        await ops.cancel(client, ours.run_id, tenant=globex)
        await ops.cancel(client, theirs.run_id, tenant=acme)


async def test_the_cli_takes_the_tenant_from_the_environment(
    client, settings, pool, worker, tenants, tmp_path: Path, monkeypatch
):
    acme, globex = tenants
    async with worker():
        theirs = await ops.start_run(client, make_spec(tenant=acme), task_queue=settings.task_queue)
        await wait_pending(client, theirs.run_id)
        monkeypatch.setenv("AGENTLEDGER_TENANT", globex)
        home = tmp_path / "home"
        status = await run_cli(settings, home, "status", theirs.run_id)
        assert status.code == 3 and status.err.strip() == f"error: {ops.no_run(theirs.run_id)}"
        listed = await run_cli(settings, home, "list", "--json")
        assert listed.code == 0 and listed.json() == []
        approve = await run_cli(
            settings, home, "approve", theirs.run_id, "--by", "li", "--role", "approver"
        )
        assert approve.code == 3 and approve.err == status.err
        widened = await run_cli(settings, home, "status", theirs.run_id, "--tenant", acme)
        assert widened.code == 5 and "acts for tenant" in widened.err, "a flag cannot widen"
        monkeypatch.setenv("AGENTLEDGER_TENANT", acme)
        own = await run_cli(settings, home, "status", theirs.run_id, "--tenant", acme, "--json")
        assert own.code == 0 and own.json()["tenant"] == acme
        await ops.cancel(client, theirs.run_id)
