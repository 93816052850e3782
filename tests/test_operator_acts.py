"""Acts that span tenants are operators': under a tenant's scope they are refused,
as `tenants set` is, or confined to the tenant (`prune`), and name no other tenant's run.

Through the `agentledger` console script and `starter.py`, with AGENTLEDGER_TENANT in the
subprocess's environment, on the real stack (dev server, Postgres, a worker).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests import client_ops as ops
from tests.mirror_seed import Seeder, fresh_database, starter
from tests.support import make_spec, rows, wait_pending
from tests.test_cli import run_cli

# Every act that spans tenants, as a tenant would type it; `tenants set` was refused first.
OPERATOR_ACTS = [
    ("deploy", "check"),
    ("deploy", "status"),
    ("deploy", "patches"),
    ("deploy", "v2", "--skip-check"),
    ("migrate",),
    ("tenants", "set", "{theirs}", "--weight", "5"),
    ("approvers", "add", "li", "--role", "approver", "--replace"),
]


@pytest.fixture
def tenants() -> tuple[str, str]:
    mark = uuid.uuid4().hex[:8]
    return f"acme-{mark}", f"globex-{mark}"


async def test_a_tenant_cannot_deploy_nor_read_every_tenants_runs(
    client, settings, worker, tenants, tmp_path: Path, monkeypatch
):
    acme, globex = tenants
    home = tmp_path / "home"
    async with worker():
        spec = make_spec(tenant=globex)
        theirs = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, theirs.run_id)

        monkeypatch.setenv("AGENTLEDGER_TENANT", acme)
        for act in OPERATOR_ACTS:
            argv = [a.format(theirs=globex) for a in act]
            done = await run_cli(settings, home, *argv, "--json", console=True)
            said = done.out + done.err
            assert done.code == 5, (argv, done.code, said)
            error = json.loads(done.err)["error"]
            assert error["kind"] == "refused" and "an operator's act" in error["message"], argv
            assert f"AGENTLEDGER_TENANT={acme}" in error["message"], argv
            assert done.out == "" and theirs.run_id not in said, (argv, said)
        # As `status` says of the same run: to acme it does not exist.
        status = await run_cli(settings, home, "status", theirs.run_id, console=True)
        assert status.code == 3

        # The operator (no tenant) still does them all: the check lists globex's run.
        monkeypatch.delenv("AGENTLEDGER_TENANT")
        checked = await run_cli(settings, home, "deploy", "check", "--json", console=True)
        assert checked.code == 0, checked.err
        assert theirs.run_id in [v["workflow_id"] for v in checked.json()["verdicts"]]
        await ops.cancel(client, theirs.run_id)


async def test_a_tenants_prune_prunes_its_own_runs_alone(database_url, tenants, tmp_path: Path):
    acme, globex = tenants
    now = datetime.now(UTC)
    async with fresh_database(database_url, "agentledger_operator_acts") as (url, pool):
        seed = Seeder(pool)
        finished = {"a-old": acme, "g-old": globex, "g-older": globex}
        for run_id, tenant in finished.items():
            await seed.run(run_id, "completed", now - timedelta(days=40), seconds=60, tenant=tenant)
            await seed.row("receipts", run_id=run_id, outcome="completed", receipt={"r": run_id})
        env = {"DATABASE_URL": url, "AGENTLEDGER_HOME": str(tmp_path)}

        async def left(table: str) -> set[str]:
            return {r["run_id"] for r in await rows(pool, f"SELECT run_id FROM {table}")}

        as_acme = {**env, "AGENTLEDGER_TENANT": acme}
        code, out, err = await starter("prune", "--older-than", "30d", env=as_acme)
        assert code == 0, err
        assert out.startswith(f"deleted 1 run of tenant {acme} that finished before "), out
        assert "g-old" not in out
        for table in ("runs", "receipts"):
            assert await left(table) == {"g-old", "g-older"}, table

        # A flag never widens a tenant's scope.
        code, out, err = await starter(
            "prune", "--older-than", "30d", "--tenant", globex, env=as_acme
        )
        assert code == 5 and "acts for tenant" in err, err
        assert await left("runs") == {"g-old", "g-older"}

        # The operator's dry run with --tenant counts that tenant's runs alone.
        code, out, err = await starter(
            "prune", "--older-than", "30d", "--dry-run", "--tenant", acme, "--json", env=env
        )
        assert code == 0, err
        assert (json.loads(out)["runs"], json.loads(out)["tenant"]) == (0, acme)
