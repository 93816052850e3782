"""`prune` forgets runs that finished before the cutoff, every row of them, and nothing else."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

from agentledger.store import retention
from tests.mirror_seed import Seeder, fresh_database, starter
from tests.support import rows

PRUNED = retention.PRUNED_TABLES
KEPT = ("tool_ledger", "outbox", "tickets")
OLD = {"o1", "o2", "o3"}  # finished 40, 35 and 31 days ago
STAY = {"live", "waiting", "recent"}  # not finished (though old), or finished 2 days ago


def sha(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


SHARED_OUTPUT = b'{"notes": "a tool output big enough to be an artifact"}'
SHARED_ANSWER = "## Summary\nThe same answer, twice."


async def seed_runs(seed: Seeder, now: datetime) -> None:
    runs = [
        ("o1", "completed", 45, 40),
        ("o2", "failed", 36, 35),
        ("o3", "cancelled", 31.5, 31),
        ("live", "running", 60, None),
        ("waiting", "waiting_for_approval", 90, None),
        ("recent", "completed", 60, 2),  # started long ago; only the finish counts
    ]
    for run_id, status, started_days, finished_days in runs:
        created = now - timedelta(days=started_days)
        seconds = None
        if finished_days is not None:
            seconds = (now - timedelta(days=finished_days) - created).total_seconds()
        await seed.run(run_id, status, created, seconds=seconds, cost_usd=0.01)
        # Every table that holds a run's record, two rows where a run usually has several.
        for n in (1, 2):
            await seed.step(
                run_id,
                f"s-{n}",
                "tool_call",
                "send_message",
                "completed",
                started_at=created,
                attempts=("failed", "succeeded"),
                output={"artifact": {"artifact_id": sha(SHARED_OUTPUT)}}
                if run_id == "recent" and n == 1
                else {"ok": True},
            )
            await seed.row(
                "events",
                run_id=run_id,
                seq=n,
                type="step.completed",
                data={"n": n},
                created_at=created,
            )
            await seed.row("conversation", run_id=run_id, idx=n, message={"role": "user"})
        await seed.row(
            "model_journal",
            run_id=run_id,
            step_id="s-1",
            attempt=1,
            model="m",
            response={"choices": []},
            tokens_in=1,
            tokens_out=1,
            cost_usd=0.01,
        )
        await seed.row(
            "model_text", run_id=run_id, step_id="s-1", attempt=1, text="## Summary\nStreamed."
        )
        await seed.row(
            "secret_values", run_id=run_id, secret_id="0" * 16, key_id="k", sealed=b"sealed"
        )
        await seed.row(
            "eval_cases", run_id=run_id, eval_id="e", case_name="c", recording={"calls": []}
        )
        answer = SHARED_ANSWER if run_id in ("o2", "recent") else f"answer of {run_id}"
        await seed.row(
            "receipts", run_id=run_id, outcome=status, receipt={"run_id": run_id, "answer": answer}
        )
        if run_id != "recent":  # its answer's artifact is o2's: same content, same address
            await artifact(seed, run_id, "answer.md", answer.encode())
        await seed.ledger(run_id, "s-1", "send_message", duplicates=1)
        await seed.row(
            "outbox",
            idempotency_key=f"{run_id}:s-1",
            run_id=run_id,
            step_id="s-1",
            recipient="ana@example.com",
            subject="s",
            body="b",
        )
        await seed.row("tickets", external_key=f"{run_id}:s-2", title="t", body="b")
    # Content-addressed artifacts written first by an old run and used by a kept one.
    await artifact(seed, "o1", "notes.json", SHARED_OUTPUT)  # in recent's step output
    await artifact(seed, "o3", "unused.json", b"only o3 ever used this")


async def artifact(seed: Seeder, run_id: str, name: str, content: bytes) -> None:
    await seed.row(
        "artifacts",
        artifact_id=sha(content),
        run_id=run_id,
        name=name,
        media_type="application/octet-stream",
        size_bytes=len(content),
        content=content,
    )


# Artifacts: o1's answer (its notes.json stays: recent uses it), none of o2's (its answer is
# recent's answer too, so the row o2 wrote first stays), o3's answer and its unused.json.
EXPECTED = {
    "receipts": 3,
    "artifacts": 3,
    "events": 6,
    "step_attempts": 12,
    "steps": 6,
    "conversation": 6,
    "model_journal": 3,
    "model_text": 3,
    "secret_values": 3,
    "eval_cases": 3,
    "runs": 3,
}


async def snapshot(pool, tables) -> dict[str, list[str]]:
    return {
        t: [
            r["row"]
            for r in await rows(pool, f"SELECT to_jsonb(t)::text AS row FROM {t} t ORDER BY 1")
        ]
        for t in tables
    }


async def run_ids(pool, table: str) -> set[str]:
    return {r["run_id"] for r in await rows(pool, f"SELECT DISTINCT run_id FROM {table}")}


async def test_prune_deletes_exactly_the_runs_that_finished_before_the_cutoff(
    database_url, tmp_path
):
    now = datetime.now(UTC)
    async with fresh_database(database_url, "agentledger_retention") as (url, pool):
        await seed_runs(Seeder(pool), now)
        before = await snapshot(pool, PRUNED + KEPT)
        env = {"DATABASE_URL": url, "AGENTLEDGER_HOME": str(tmp_path)}

        # A dry run counts what would go and changes nothing, from code and from the CLI.
        dry = await retention.prune(pool, cutoff=now - timedelta(days=30), dry_run=True)
        assert (dry.dry_run, dry.runs, dry.deleted) == (True, 3, EXPECTED)
        assert dry.artifacts_kept_for_newer_runs == 2
        code, out, err = await starter(
            "prune", "--older-than", "30d", "--dry-run", "--json", env=env
        )
        assert code == 0, err
        assert json.loads(out)["deleted"] == EXPECTED
        assert await snapshot(pool, PRUNED + KEPT) == before

        # Without an age or AGENTLEDGER_RETENTION_DAYS nothing is pruned, and it says why.
        code, out, err = await starter("prune", env=env)
        assert code == 2 and "AGENTLEDGER_RETENTION_DAYS" in err
        assert await snapshot(pool, PRUNED + KEPT) == before

        # AGENTLEDGER_RETENTION_DAYS is the default age.
        code, out, err = await starter("prune", env={**env, "AGENTLEDGER_RETENTION_DAYS": "30"})
        assert code == 0, err
        assert out.startswith("deleted 3 runs that finished before ")
        assert "2 artifacts kept: newer runs refer to them" in out

        for table in PRUNED:
            left = await run_ids(pool, table)
            assert not left & OLD, f"{table} still holds {left & OLD}"
            assert left == STAY, table
        after = await snapshot(pool, PRUNED + KEPT)
        # The ledger, the outbox and the tickets are untouched, old runs' rows included.
        for table in KEPT:
            assert after[table] == before[table], table
        # Kept runs lost nothing: every row they had is still there, unchanged.
        for table in PRUNED:
            if table == "artifacts":
                continue
            kept_before = [r for r in before[table] if json.loads(r)["run_id"] in STAY]
            assert after[table] == kept_before, table
        artifacts = await rows(pool, "SELECT artifact_id, run_id, name FROM artifacts")
        by_id = {a["artifact_id"]: (a["run_id"], a["name"]) for a in artifacts}
        assert by_id[sha(SHARED_OUTPUT)] == ("recent", "notes.json")
        assert by_id[sha(SHARED_ANSWER.encode())] == ("recent", "answer.md")
        assert sha(b"only o3 ever used this") not in by_id
        assert {run for run, _ in by_id.values()} == {"live", "waiting", "recent"}

        # Pruning again finds nothing more.
        again = await retention.prune(pool, cutoff=now - timedelta(days=30), dry_run=False)
        assert again.runs == 0 and set(again.deleted.values()) == {0}
        assert await snapshot(pool, PRUNED + KEPT) == after
