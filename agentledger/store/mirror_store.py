"""All SQL that writes the run mirror, in one place.

Two writers touch a step row, and fencing keeps them apart:
- an activity attempt writes its intent, lease and report, but only while the row is not
  final and no newer attempt has claimed it;
- the workflow makes a row final for the attempt whose result it accepted; after that, no
  attempt (a zombie that outlived its timeout included) can change the row.
Every write is an upsert keyed by (run_id, step_id) or (run_id, seq), so a retried write
never adds a row. A row Postgres refuses for its data (a number out of range, say) is
recorded in `mirror_failures` instead, and the rest of its batch lands: no retry would
change the data, and a run must not wait for ever on a write that cannot happen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core import faults
from agentledger.core.results import Receipt, RetryRecord
from agentledger.core.spec import JsonDict
from agentledger.core.storable import json_dumps
from agentledger.core.wire import MirrorBatch, RunEvent, StepRecord
from agentledger.store.db import pipelined_transaction
from agentledger.store.group_commit import GroupCommit
from agentledger.store.model_journal import EARLIEST_ANSWER, RECORD_ANSWER, Answer
from agentledger.store.refused_data import REFUSED_DATA_ERRORS

T = TypeVar("T")

# How a retried step's earlier attempt that never reported is named (receipts, `watch`).
LOST = "lost: its worker stopped before reporting"
NO_RECORD = "left no record"

# A run's batch as one statement's common table expressions: the run row, the steps the run
# accepted and its events, from the batch as JSON (%(batch)s), each row fenced as the run
# wrote it (never backwards). One statement needs no BEGIN or COMMIT of its own, and its
# rows cost the worker one parameter instead of one statement each.
# - runs: an older snapshot (a smaller version and fence) never wins.
# - steps: a write made earlier in the run's history (a smaller fence) that lands late
#   changes nothing; a step the run ended during keeps no attempt's output (the run never
#   accepted it); a final row is only rewritten for the same accepted attempt (a retried
#   write, or the re-run of a lost workflow task).
# - events: a re-sent event changes its row only from a later write.
# One statement may not write a row twice: `_distinct_rows` splits a batch that names a
# step or an event twice.
BATCH_ROWS = """
    batch AS (SELECT %(batch)s::jsonb AS j),
    run_row AS (
        INSERT INTO runs (run_id, version, agent, profile_hash, tenant, user_id, task,
            status, current_step_id, pause_reason, model, tokens_in, tokens_out, cost_usd,
            duplicates_prevented, checkpoint, result, error, created_at, updated_at,
            finished_at, fence, priority, requester)
        SELECT r.run_id, r.version, r.agent, r.profile_hash, r.tenant, r."user", r.task,
            r.status, r.current_step_id, r.pause_reason, r.model, r.tokens_in, r.tokens_out,
            r.cost_usd, r.duplicates_prevented, r.checkpoint, r.result, r.error, r.created_at,
            r.updated_at, r.finished_at, %(batch_fence)s, r.priority,
            nullif(r.requester, 'null'::jsonb)
        FROM batch, jsonb_to_record(batch.j->'run') AS r(run_id text, version bigint,
            agent text, profile_hash text, tenant text, "user" text, task text, status text,
            current_step_id text, pause_reason text, model text, tokens_in bigint,
            tokens_out bigint, cost_usd float8, duplicates_prevented int, checkpoint jsonb,
            result text, error text, created_at timestamptz, updated_at timestamptz,
            finished_at timestamptz, priority int, requester jsonb)
        WHERE %(with_run)s
        ON CONFLICT (run_id) DO UPDATE SET
            version = EXCLUDED.version, status = EXCLUDED.status,
            current_step_id = EXCLUDED.current_step_id,
            pause_reason = EXCLUDED.pause_reason, model = EXCLUDED.model,
            tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
            cost_usd = EXCLUDED.cost_usd,
            duplicates_prevented = EXCLUDED.duplicates_prevented,
            checkpoint = EXCLUDED.checkpoint, result = EXCLUDED.result,
            error = EXCLUDED.error, created_at = EXCLUDED.created_at,
            updated_at = EXCLUDED.updated_at, finished_at = EXCLUDED.finished_at,
            fence = EXCLUDED.fence,
            priority = coalesce(EXCLUDED.priority, runs.priority),
            requester = coalesce(EXCLUDED.requester, runs.requester)
        WHERE (runs.version, runs.fence) < (EXCLUDED.version, EXCLUDED.fence)
    ),
    step_rows AS (
        INSERT INTO steps (run_id, step_id, seq, type, name, status, input, output, error,
            attempt, tokens_in, tokens_out, cost_usd, idempotency_key, final,
            started_at, finished_at, lease_until, fence)
        SELECT %(batch_run)s, s.step_id, s.seq, s.type, s.name, s.status, s.input,
            nullif(s.output, 'null'::jsonb), s.error, s.attempt, s.tokens_in, s.tokens_out,
            s.cost_usd, s.idempotency_key, s.final, s.started_at, s.finished_at, NULL,
            %(batch_fence)s
        FROM batch, jsonb_to_recordset(batch.j->'steps') AS s(step_id text, seq int,
            type text, name text, status text, input jsonb, output jsonb, error text,
            attempt int, tokens_in bigint, tokens_out bigint, cost_usd float8,
            idempotency_key text, started_at timestamptz, finished_at timestamptz,
            final boolean)
        ON CONFLICT (run_id, step_id) DO UPDATE SET
            seq = EXCLUDED.seq, type = EXCLUDED.type, name = EXCLUDED.name,
            status = EXCLUDED.status,
            output = CASE WHEN EXCLUDED.status IN ('cancelled', 'abandoned', 'interrupted')
                          THEN NULL
                          ELSE coalesce(EXCLUDED.output, steps.output) END,
            error = EXCLUDED.error,
            attempt = EXCLUDED.attempt, tokens_in = EXCLUDED.tokens_in,
            tokens_out = EXCLUDED.tokens_out, cost_usd = EXCLUDED.cost_usd,
            idempotency_key = coalesce(EXCLUDED.idempotency_key, steps.idempotency_key),
            final = EXCLUDED.final,
            started_at = coalesce(steps.started_at, EXCLUDED.started_at),
            finished_at = EXCLUDED.finished_at, lease_until = NULL, updated_at = now(),
            fence = EXCLUDED.fence
        WHERE steps.fence <= EXCLUDED.fence
          AND (NOT steps.final OR steps.attempt = EXCLUDED.attempt)
    ),
    event_rows AS (
        INSERT INTO events (run_id, seq, type, step_id, data, created_at, fence)
        SELECT %(batch_run)s, e.seq, e.type, e.step_id, e.data, e.at, %(batch_fence)s
        FROM batch, jsonb_to_recordset(batch.j->'events') AS e(seq int, type text,
            step_id text, data jsonb, at timestamptz)
        ON CONFLICT (run_id, seq) DO UPDATE SET type = EXCLUDED.type,
            step_id = EXCLUDED.step_id, data = EXCLUDED.data,
            created_at = EXCLUDED.created_at, fence = EXCLUDED.fence
        WHERE events.fence < EXCLUDED.fence
    )"""

# An attempt's claim on its step, and its row in the attempts journal.
CLAIM_ROWS = """
    claimed AS (
        INSERT INTO steps (run_id, step_id, seq, type, name, status, input, attempt,
                           worker, lease_until, idempotency_key, started_at)
        VALUES (%(run)s, %(step)s, %(seq)s, %(type)s, %(name)s, 'running',
                %(input)s, %(attempt)s, %(worker)s,
                now() + make_interval(secs => %(lease)s), %(key)s, now())
        ON CONFLICT (run_id, step_id) DO UPDATE SET
            status = 'running', attempt = EXCLUDED.attempt, worker = EXCLUDED.worker,
            lease_until = EXCLUDED.lease_until, updated_at = now()
        WHERE NOT steps.final AND steps.attempt <= EXCLUDED.attempt
        RETURNING checkpoint
    ),
    journal AS (
        INSERT INTO step_attempts (run_id, step_id, attempt, worker, status)
        VALUES (%(run)s, %(step)s, %(attempt)s, %(worker)s, 'running')
        ON CONFLICT DO NOTHING
    )"""

# A quick attempt's claim and report at once: the claim's fence (not final, no newer
# attempt) guards the report; the attempts journal is written whatever the fence says, as
# `end_attempt` writes it.
ENDED_CLAIM_ROWS = """
    claimed AS (
        INSERT INTO steps (run_id, step_id, seq, type, name, status, input, output,
                           error, attempt, worker, lease_until, idempotency_key,
                           tokens_in, tokens_out, cost_usd, started_at)
        VALUES (%(run)s, %(step)s, %(seq)s, %(type)s, %(name)s, %(step_status)s,
                %(input)s, %(output)s, %(error)s, %(attempt)s, %(worker)s, NULL,
                %(key)s, %(tin)s, %(tout)s, %(cost)s, %(started)s)
        ON CONFLICT (run_id, step_id) DO UPDATE SET
            status = EXCLUDED.status, output = EXCLUDED.output,
            error = EXCLUDED.error, attempt = EXCLUDED.attempt,
            worker = EXCLUDED.worker, lease_until = NULL,
            tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
            cost_usd = EXCLUDED.cost_usd, updated_at = now()
        WHERE NOT steps.final AND steps.attempt <= EXCLUDED.attempt
        RETURNING checkpoint
    ),
    journal AS (
        INSERT INTO step_attempts (run_id, step_id, attempt, worker, status, error,
                                   tokens_in, tokens_out, cost_usd, started_at,
                                   finished_at)
        VALUES (%(run)s, %(step)s, %(attempt)s, %(worker)s, %(status)s, %(error)s,
                %(tin)s, %(tout)s, %(cost)s, %(started)s, now())
        ON CONFLICT (run_id, step_id, attempt) DO UPDATE SET
            status = EXCLUDED.status, error = EXCLUDED.error,
            tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
            cost_usd = EXCLUDED.cost_usd, finished_at = EXCLUDED.finished_at
    )"""

# What a statement with a claim returns: the step's saved checkpoint (no row when the claim
# lost), and the answer an earlier attempt journaled, read in the same statement.
CLAIM_REPLY = "SELECT checkpoint, NULL, NULL FROM claimed"
CLAIM_REPLY_WITH_ANSWER = f"""
    SELECT (SELECT checkpoint FROM claimed), answer.attempt, answer.response
    FROM (SELECT 1) AS one LEFT JOIN LATERAL ({EARLIEST_ANSWER}) AS answer ON true"""


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended, as its report records it."""

    status: str  # "succeeded" or "failed"
    output: Any = None
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    def params(self) -> JsonDict:
        return {
            "status": self.status,
            "step_status": f"attempt_{self.status}",
            "output": Jsonb(self.output),
            "error": self.error,
            "tin": self.tokens_in,
            "tout": self.tokens_out,
            "cost": self.cost_usd,
        }


@dataclass(frozen=True)
class _Write:
    """One caller's write: a run's accepted batch, an attempt's claim of its step, or both
    (the batch a step's activity carries, applied in its claim's transaction). A claim with
    an `end` is an attempt that already finished: claim and report in one statement."""

    batch: MirrorBatch | None = None
    claim: JsonDict | None = None
    end: AttemptEnd | None = None
    answer_of: str | None = None  # the model whose journaled answer the claim reads

    @property
    def run_id(self) -> str:
        return self.batch.run.run_id if self.batch is not None else str((self.claim or {})["run"])


@dataclass(frozen=True)
class _Claimed:
    """What a write's claim read: the step's saved checkpoint ({} when the claim lost: a
    newer attempt, or the step already final), and the model answer it asked for."""

    checkpoint: JsonDict
    answer: tuple[int, JsonDict] | None = None


@dataclass(frozen=True)
class _Statement:
    """One statement of a write: its rows (common table expressions) and its reply, which
    is the write's claim when `claims`; `steps` names the step rows it writes."""

    rows: str
    params: JsonDict
    reply: str = "SELECT 1"
    claims: bool = False
    steps: frozenset[str] = frozenset()

    @property
    def sql(self) -> str:
        return f"WITH {self.rows} {self.reply}"


class MirrorStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        # One per store, so one per worker process: its runs' mirror batches and its
        # attempts' claims share commits.
        self.group_commit: GroupCommit[_Write, _Claimed] = GroupCommit(
            self._write_group, self._write_alone
        )

    # ------------------------------------------------------------ written by activity attempts

    async def begin_attempt(
        self,
        *,
        run_id: str,
        step_id: str,
        seq: int,
        type: str,
        name: str,
        attempt: int,
        worker: str,
        lease_seconds: float,
        input: JsonDict,
        idempotency_key: str | None = None,
        batch: MirrorBatch | None = None,
        end: AttemptEnd | None = None,
        started_at: datetime | None = None,
    ) -> JsonDict:
        """Claim the step for this attempt; returns the step's saved mid-step checkpoint.

        `batch`, what the run accepted before it scheduled this step, is applied in the
        same transaction, exactly as `sync` applies it: the step needs no write of its own.
        Claims and batches that arrive together share one transaction (group commit).

        With `end`, the attempt already ran (from `started_at`) and ended: the claim and
        its report are one statement, fenced as the two are apart, so a quick attempt
        costs one round trip instead of two.
        """
        write = self._claim(
            run_id=run_id,
            step_id=step_id,
            seq=seq,
            type=type,
            name=name,
            attempt=attempt,
            worker=worker,
            lease_seconds=lease_seconds,
            input=input,
            idempotency_key=idempotency_key,
            started_at=started_at,
        )
        claimed = await self.group_commit.submit(_Write(batch=batch, claim=write, end=end))
        return claimed.checkpoint

    async def begin_model_attempt(
        self, *, model: str, batch: MirrorBatch | None = None, **claim: Any
    ) -> tuple[int, JsonDict] | None:
        """Claim a model step, as `begin_attempt` does (`claim`: its run_id, step_id, seq,
        attempt, worker, lease_seconds, input), and read in the same statement the answer
        an earlier attempt journaled: (its attempt, the response), paid for, so the step
        reuses it instead of asking again."""
        write = self._claim(type="model_call", name=model, **claim)
        claimed = await self.group_commit.submit(_Write(batch=batch, claim=write, answer_of=model))
        return claimed.answer

    @staticmethod
    def _claim(
        *,
        run_id: str,
        step_id: str,
        seq: int,
        type: str,
        name: str,
        attempt: int,
        worker: str,
        lease_seconds: float,
        input: JsonDict,
        idempotency_key: str | None = None,
        started_at: datetime | None = None,
    ) -> JsonDict:
        return {
            "run": run_id,
            "step": step_id,
            "seq": seq,
            "type": type,
            "name": name,
            "input": Jsonb(input),
            "attempt": attempt,
            "worker": worker,
            "lease": lease_seconds,
            "key": idempotency_key,
            "started": started_at,
        }

    @staticmethod
    def _claim_statement(write: _Write) -> _Statement:
        """A write's claim (and its report, for a quick attempt), as one statement."""
        assert write.claim is not None
        step = frozenset([write.claim["step"]])
        if write.end is not None:
            params = {**write.claim, **write.end.params()}
            return _Statement(ENDED_CLAIM_ROWS, params, CLAIM_REPLY, True, step)
        if write.answer_of is not None:
            params = {**write.claim, "model": write.answer_of}
            return _Statement(CLAIM_ROWS, params, CLAIM_REPLY_WITH_ANSWER, True, step)
        return _Statement(CLAIM_ROWS, write.claim, CLAIM_REPLY, True, step)

    async def _read_claim(self, cur: Any) -> _Claimed:
        row = await cur.fetchone()
        if row is None:
            return _Claimed({})
        checkpoint, answer_attempt, answer = row
        return _Claimed(
            dict(checkpoint or {}),
            None if answer_attempt is None else (int(answer_attempt), dict(answer)),
        )

    async def renew_lease(
        self, *, run_id: str, step_id: str, attempt: int, lease_seconds: float
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE steps SET lease_until = now() + make_interval(secs => %s)
                   WHERE run_id = %s AND step_id = %s AND attempt = %s AND NOT final""",
                (lease_seconds, run_id, step_id, attempt),
            )

    async def save_step_checkpoint(
        self, *, run_id: str, step_id: str, attempt: int, patch: JsonDict
    ) -> None:
        """Merge mid-step progress at once, outside the tool's transaction, for the next try."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE steps SET checkpoint = checkpoint || %s, updated_at = now()
                   WHERE run_id = %s AND step_id = %s AND attempt = %s AND NOT final""",
                (Jsonb(patch), run_id, step_id, attempt),
            )

    async def end_attempt(
        self,
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        status: str,
        output: Any = None,
        error: str | None = None,
        tokens_in: int = 0,
        tokens_out: int = 0,
        cost_usd: float = 0.0,
        answer: Answer | None = None,
    ) -> bool:
        """Report an attempt's outcome; returns False when the step was already fenced off.

        `answer`, a model attempt's response, is journaled in the same statement, fenced or
        not (it is paid for): a model step's report costs no round trip of its own."""
        # One statement, so one round trip and atomic: the journal row and the fenced report.
        journal_answer = "" if answer is None else f", answer AS ({RECORD_ANSWER})"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """
                WITH journal AS (
                    UPDATE step_attempts SET status = %(status)s, error = %(error)s,
                           tokens_in = %(tin)s, tokens_out = %(tout)s, cost_usd = %(cost)s,
                           finished_at = now()
                    WHERE run_id = %(run)s AND step_id = %(step)s AND attempt = %(attempt)s
                ), report AS (
                    UPDATE steps SET status = %(step_status)s, output = %(output)s,
                           error = %(error)s, tokens_in = %(tin)s, tokens_out = %(tout)s,
                           cost_usd = %(cost)s, lease_until = NULL, updated_at = now()
                    WHERE run_id = %(run)s AND step_id = %(step)s AND attempt = %(attempt)s
                      AND NOT final
                    RETURNING 1
                )"""
                + journal_answer
                + """
                SELECT count(*) FROM report
                """,
                {
                    **AttemptEnd(status, output, error, tokens_in, tokens_out, cost_usd).params(),
                    **({} if answer is None else answer.params()),
                    "run": run_id,
                    "step": step_id,
                    "attempt": attempt,
                },
            )
        row = await cur.fetchone()
        return row is not None and row[0] == 1

    # ------------------------------------------------------------ written by the workflow

    async def sync(self, batch: MirrorBatch) -> None:
        """Apply what the workflow accepted: in one transaction (with the other runs' batches
        that arrive meanwhile, see agentledger.store.group_commit), idempotent, never backwards."""
        await self.group_commit.submit(_Write(batch=batch))

    async def _write_group(self, writes: list[_Write]) -> list[_Claimed]:
        """Several callers' writes in one transaction; one refused row fails the group, and
        the group commit then writes each alone. Written in the order of their runs (a run's
        own in arrival order), so two groups in flight lock rows in one order: no deadlock."""
        order = sorted(range(len(writes)), key=lambda i: writes[i].run_id)
        saved = await self._write_pipelined([writes[i] for i in order])
        answers: dict[int, _Claimed] = dict(zip(order, saved, strict=True))
        return [answers[i] for i in range(len(writes))]

    async def _write_alone(self, write: _Write) -> _Claimed:
        try:
            [saved] = await self._write_pipelined([write])
        except REFUSED_DATA_ERRORS:
            if write.batch is not None:
                await self._apply_row_by_row(write.batch)
            if write.claim is None:
                return _Claimed({})
            claim = self._claim_statement(write)
            async with self.pool.connection() as conn:
                return await self._read_claim(await conn.execute(claim.sql, claim.params))
        return saved

    async def _write_pipelined(self, writes: list[_Write]) -> list[_Claimed]:
        # A write is one statement (its batch and its claim) unless its batch names a row
        # twice. One statement alone is its own transaction; several are pipelined in one
        # (sent without waiting for each reply, so a group costs about one round trip however
        # many rows it carries). Writes are applied in arrival order; each row's fence keeps
        # a run's newest state, and each claim's fence its newest attempt, whatever the order.
        statements = [statement for write in writes for statement in self._statements(write)]
        async with self.pool.connection() as conn:
            if len(statements) == 1 and not faults.armed("mirror.in_transaction"):
                [only] = statements
                cursors = [await conn.execute(only.sql, only.params)]
            else:
                async with pipelined_transaction(conn) as pipeline:
                    cursors = [await conn.execute(each.sql, each.params) for each in statements]
                    if faults.armed("mirror.in_transaction"):
                        # The server has every row; only the commit is missing.
                        await pipeline.sync()
                        faults.fire("mirror.in_transaction")
            # Read once committed: a pipeline's replies came back with the COMMIT's.
            saved = iter(
                [
                    await self._read_claim(cur)
                    for cur, statement in zip(cursors, statements, strict=True)
                    if statement.claims
                ]
            )
        return [_Claimed({}) if write.claim is None else next(saved) for write in writes]

    def _statements(self, write: _Write) -> list[_Statement]:
        """A write as statements: its batch's, the last carrying the claim too unless that
        statement writes the claimed step's row itself (one statement writes a row once)."""
        statements = [] if write.batch is None else self._batch_statements(write.batch)
        if write.claim is None:
            return statements
        claim = self._claim_statement(write)
        if statements and write.claim["step"] not in statements[-1].steps:
            last = statements.pop()
            rows, params = f"{last.rows}, {claim.rows}", {**last.params, **claim.params}
            claim = _Statement(rows, params, claim.reply, True, last.steps | claim.steps)
        return [*statements, claim]

    @staticmethod
    def _batch_statements(batch: MirrorBatch, *, with_run: bool = True) -> list[_Statement]:
        return [
            _Statement(
                BATCH_ROWS,
                {
                    "batch": _batch_json(part),
                    "batch_run": batch.run.run_id,
                    "batch_fence": batch.fence,
                    "with_run": with_run and i == 0,
                },
                steps=frozenset(step.step_id for step in part.steps),
            )
            for i, part in enumerate(_distinct_rows(batch))
        ]

    async def _apply(self, conn: Any, batch: MirrorBatch) -> None:
        for statement in self._batch_statements(batch):
            await conn.execute(statement.sql, statement.params)

    async def _apply_row_by_row(self, batch: MirrorBatch) -> None:
        """The batch again, each row on its own: the refused ones are recorded, not retried."""
        run_id, fence = batch.run.run_id, batch.fence

        def alone(steps: list[StepRecord], events: list[RunEvent]) -> MirrorBatch:
            return batch.model_copy(update={"steps": steps, "events": events})

        rows = [("runs", alone([], []), True)]
        rows += [(f"steps[{step.step_id}]", alone([step], []), False) for step in batch.steps]
        rows += [(f"events[{e.seq}]", alone([], [e]), False) for e in batch.events]
        async with self.pool.connection() as conn, conn.transaction():
            for target, row, with_run in rows:
                [statement] = self._batch_statements(row, with_run=with_run)
                try:
                    async with conn.transaction():  # a savepoint: a refusal undoes this row
                        await conn.execute(statement.sql, statement.params)
                except REFUSED_DATA_ERRORS as err:
                    await self._record_failure(conn, run_id, target, fence, err)

    async def _record_failure(
        self, conn: Any, run_id: str, target: str, fence: int, err: Exception
    ) -> None:
        await conn.execute(
            """INSERT INTO mirror_failures (run_id, target, fence, error)
               VALUES (%s, %s, %s, %s)
               ON CONFLICT (run_id, target, fence) DO UPDATE SET error = EXCLUDED.error""",
            (run_id, target, fence, f"{type(err).__name__}: {err}"),
        )

    async def failures(self, run_id: str) -> list[tuple[str, str]]:
        """What Postgres refused to store for this run: (target, error), oldest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT target, error FROM mirror_failures WHERE run_id = %s
                   ORDER BY fence, target""",
                (run_id,),
            )
            return [(str(target), str(error)) for target, error in await cur.fetchall()]

    async def rebuild(self, batch: MirrorBatch, receipt: Receipt | None) -> None:
        """Replace a run's workflow-written rows with those derived from its history.

        Attempt-written columns (worker, lease, mid-step checkpoint) and the attempts
        journal stay: history does not hold them. See `agentledger.client.projection`.
        """
        run_id = batch.run.run_id
        keep = [step.step_id for step in batch.steps]
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))
            await conn.execute("DELETE FROM events WHERE run_id = %s", (run_id,))
            await conn.execute("DELETE FROM receipts WHERE run_id = %s", (run_id,))
            await conn.execute(
                "DELETE FROM steps WHERE run_id = %s AND NOT step_id = ANY(%s)", (run_id, keep)
            )
            await conn.execute(
                "UPDATE steps SET final = false, output = NULL, fence = 0 WHERE run_id = %s",
                (run_id,),
            )
            await self._apply(conn, batch)
            if receipt is not None:
                await self._store_receipt(conn, receipt)

    async def save_run_checkpoint(
        self, run_id: str, checkpoint: JsonDict, fence: int | None = None
    ) -> bool:
        """Merge an accepted checkpoint into the run row, unless a later mirror write (a
        greater fence) already carried a newer one; returns whether it was written."""
        async with self.pool.connection() as conn:
            try:
                cur = await conn.execute(
                    """UPDATE runs SET checkpoint = %s
                       WHERE run_id = %s AND (%s::bigint IS NULL OR fence <= %s)""",
                    (Jsonb(checkpoint), run_id, fence, fence),
                )
            except REFUSED_DATA_ERRORS as err:
                await self._record_failure(conn, run_id, "runs.checkpoint", fence or 0, err)
                return False
            return cur.rowcount == 1

    async def attempt_outcome(self, run_id: str, step_id: str, attempt: int) -> str:
        """How one attempt of a step ended, in words."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT status, error FROM step_attempts
                   WHERE run_id = %s AND step_id = %s AND attempt = %s""",
                (run_id, step_id, attempt),
            )
            row = await cur.fetchone()
        if row is None:
            return f"attempt {attempt} {NO_RECORD}"
        status, error = row
        if status == "running":
            return f"attempt {attempt} {LOST}"
        return f"attempt {attempt} {status}" + (f": {error}" if error else "")

    async def retries(self, run_id: str, conn: Any | None = None) -> list[RetryRecord]:
        """Every step that needed more than one attempt, with what went wrong each time; read
        on `conn` when given (inside its transaction), else on a connection of the pool."""
        if conn is None:
            async with self.pool.connection() as own:
                return await self.retries(run_id, own)
        cur = await conn.execute(
            """SELECT step_id, attempt, status, error FROM step_attempts
               WHERE run_id = %s ORDER BY step_id, attempt""",
            (run_id,),
        )
        rows = await cur.fetchall()
        by_step: dict[str, list[str]] = {}
        attempts: dict[str, int] = {}
        for step_id, attempt, status, error in rows:
            # An earlier attempt with no row ended before it wrote its claim: a quick one
            # whose worker stopped (agentledger.activities.step_claim), say.
            for missing in range(attempts.get(step_id, 0) + 1, attempt):
                by_step.setdefault(step_id, []).append(f"attempt {missing} {NO_RECORD}")
            attempts[step_id] = attempt
            if status == "failed":
                by_step.setdefault(step_id, []).append(f"attempt {attempt} failed: {error}")
            elif status == "running":
                by_step.setdefault(step_id, []).append(f"attempt {attempt} {LOST}")
        return [
            RetryRecord(step_id=step, attempts=attempts[step], reason="; ".join(reasons))
            for step, reasons in by_step.items()
        ]

    async def finish(
        self, batch: MirrorBatch, complete: Callable[[Any], Awaitable[Receipt]]
    ) -> Receipt:
        """A run's last rows and its receipt in one transaction of two round trips: the
        rows, then `complete(conn)` (its reads, on the same connection, see them), then the
        receipt it returns. Data Postgres refuses raises, and nothing is written."""
        async with self.pool.connection() as conn:
            async with pipelined_transaction(conn):
                await self._apply(conn, batch)
                receipt = await complete(conn)
                await self._store_receipt(conn, receipt)
                faults.fire("receipt.in_write")
        return receipt

    async def record_receipt(self, receipt: Receipt) -> str | None:
        """Store the receipt, and the final answer as a content-addressed artifact."""
        try:
            async with self.pool.connection() as conn, conn.transaction():
                artifact_id = await self._store_receipt(conn, receipt)
                faults.fire("receipt.in_write")
        except REFUSED_DATA_ERRORS as err:
            async with self.pool.connection() as conn:
                await self._record_failure(conn, receipt.run_id, "receipts", 0, err)
            return None
        return artifact_id

    async def _store_receipt(self, conn: Any, receipt: Receipt) -> str | None:
        artifact_id = None
        if receipt.answer:
            body = receipt.answer.encode()
            artifact_id = "sha256:" + hashlib.sha256(body).hexdigest()
            await conn.execute(
                """INSERT INTO artifacts (artifact_id, run_id, step_id, name, media_type,
                                          size_bytes, content)
                   VALUES (%s, %s, NULL, 'answer.md', 'text/markdown', %s, %s)
                   ON CONFLICT (artifact_id) DO NOTHING""",
                (artifact_id, receipt.run_id, len(body), body),
            )
        await conn.execute(
            """INSERT INTO receipts (run_id, outcome, receipt) VALUES (%s, %s, %s)
               ON CONFLICT (run_id) DO UPDATE SET outcome = EXCLUDED.outcome,
                   receipt = EXCLUDED.receipt""",
            (receipt.run_id, receipt.outcome.value, Jsonb(receipt.model_dump(mode="json"))),
        )
        return artifact_id


def _batch_json(batch: MirrorBatch) -> str:
    """The batch as JSON text Postgres accepts as `jsonb` (a NUL spelled out, as
    agentledger.core.storable spells it in every other value the mirror writes)."""
    text = batch.model_dump_json()
    if "\\u0000" in text:
        text = json_dumps(batch.model_dump(mode="json"))
    return text


def _distinct_rows(batch: MirrorBatch) -> list[MirrorBatch]:
    """The batch as batches in which no step and no event appears twice, in order: a row's
    second version goes in the second, and so on (a batch put back after a step that did not
    complete may hold a row that a newer version follows)."""
    steps = _by_occurrence(batch.steps, lambda step: step.step_id)
    events = _by_occurrence(batch.events, lambda event: event.seq)
    if len(steps) <= 1 and len(events) <= 1:
        return [batch]
    return [
        batch.model_copy(
            update={
                "steps": steps[i] if i < len(steps) else [],
                "events": events[i] if i < len(events) else [],
            }
        )
        for i in range(max(len(steps), len(events)))
    ]


def _by_occurrence(items: list[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """`items` split so that the k-th item of each key is in the k-th list."""
    parts: list[list[T]] = []
    seen: dict[Hashable, int] = {}
    for item in items:
        k = seen.get(key(item), 0)
        seen[key(item)] = k + 1
        if k == len(parts):
            parts.append([])
        parts[k].append(item)
    return parts
