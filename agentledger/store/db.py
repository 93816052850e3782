"""The Postgres mirror's schema, declared once, and the one way to open a pool on it.

Migrations are an ordered list; each runs once, in its own transaction, under an advisory
lock so that several workers starting together do not race. They run only where the schema
may change: a worker's start, `agentledger up` and `agentledger migrate`. A read (the CLI's
`list`, `receipt`, ...) checks the schema's version instead, and says what to do if it lags.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncPipeline
from psycopg.abc import Buffer
from psycopg.pq import TransactionStatus
from psycopg.types.json import set_json_dumps
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.abc import AsyncConninfoParam

from agentledger.core.errors import ServiceUnreachable, SetupError
from agentledger.core.set_up_bound import seconds_left
from agentledger.core.storable import NUL, escape_nul, json_dumps

MIGRATION_LOCK = 424242

MIGRATIONS: list[str] = [
    # 1: runs, steps, attempts, events, artifacts, receipts, the idempotency ledger. (The demo's
    # outbox was created here once; the demo's tools bring their own tables now.)
    """
    CREATE TABLE runs (
        run_id text PRIMARY KEY,
        version bigint NOT NULL,
        tenant text NOT NULL,
        user_id text NOT NULL,
        task text NOT NULL,
        status text NOT NULL,
        current_step_id text,
        model text,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        duplicates_prevented int NOT NULL DEFAULT 0,
        checkpoint jsonb NOT NULL DEFAULT '{}',
        result text,
        error text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        finished_at timestamptz
    );
    CREATE INDEX runs_active_idx ON runs (status)
        WHERE status NOT IN ('completed', 'failed', 'cancelled');
    CREATE INDEX runs_tenant_idx ON runs (tenant, created_at DESC);

    CREATE TABLE steps (
        run_id text NOT NULL,
        step_id text NOT NULL,
        seq int NOT NULL,
        type text NOT NULL,
        name text NOT NULL,
        status text NOT NULL,
        input jsonb NOT NULL DEFAULT '{}',
        output jsonb,
        error text,
        attempt int NOT NULL DEFAULT 1,
        worker text,
        lease_until timestamptz,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        idempotency_key text,
        checkpoint jsonb NOT NULL DEFAULT '{}',
        final boolean NOT NULL DEFAULT false,
        started_at timestamptz,
        finished_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, step_id)
    );

    CREATE TABLE step_attempts (
        run_id text NOT NULL,
        step_id text NOT NULL,
        attempt int NOT NULL,
        worker text NOT NULL,
        status text NOT NULL,
        error text,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        started_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz,
        PRIMARY KEY (run_id, step_id, attempt)
    );

    CREATE TABLE events (
        run_id text NOT NULL,
        seq int NOT NULL,
        type text NOT NULL,
        step_id text,
        data jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL,
        PRIMARY KEY (run_id, seq)
    );

    CREATE TABLE artifacts (
        artifact_id text PRIMARY KEY,
        run_id text NOT NULL,
        step_id text,
        name text NOT NULL,
        media_type text NOT NULL,
        size_bytes bigint NOT NULL,
        content bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX artifacts_run_idx ON artifacts (run_id);

    CREATE TABLE receipts (
        run_id text PRIMARY KEY,
        outcome text NOT NULL,
        receipt jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE tool_ledger (
        idempotency_key text PRIMARY KEY,
        run_id text NOT NULL,
        step_id text NOT NULL,
        tool text NOT NULL,
        status text NOT NULL,
        result jsonb,
        attempt int NOT NULL,
        duplicates_prevented int NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        last_duplicate_at timestamptz
    );
    CREATE INDEX tool_ledger_run_idx ON tool_ledger (run_id);

    -- What is running now, and which worker holds each step until when.
    CREATE VIEW active_steps AS
        SELECT r.run_id, r.tenant, r.status AS run_status, s.step_id, s.type, s.name,
               s.status AS step_status, s.attempt, s.worker, s.lease_until
        FROM runs r JOIN steps s USING (run_id)
        WHERE r.status NOT IN ('completed', 'failed', 'cancelled') AND NOT s.final;

    -- What each run did and cost, step by step.
    CREATE VIEW run_steps AS
        SELECT run_id, seq, step_id, type, name, status, attempt, tokens_in, tokens_out,
               cost_usd, started_at, finished_at
        FROM steps ORDER BY run_id, seq;
    """,
    # 2: failure semantics: the model-response journal, reconciliations. (The demo's ticket desk
    # was created here once.)
    """
    CREATE TABLE model_journal (
        run_id text NOT NULL,
        step_id text NOT NULL,
        attempt int NOT NULL,
        model text NOT NULL,
        response jsonb NOT NULL,
        tokens_in bigint NOT NULL,
        tokens_out bigint NOT NULL,
        cost_usd numeric(14, 6) NOT NULL,
        reused_by int,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, step_id, attempt)
    );

    ALTER TABLE runs ADD COLUMN pause_reason text;
    ALTER TABLE tool_ledger ADD COLUMN reconciliation text;
    ALTER TABLE tool_ledger ADD COLUMN reconciled_at timestamptz;
    """,
    # 3: backlogs: each agent's ordered task list, mirrored from its AgentBacklog workflow.
    """
    CREATE TABLE backlogs (
        agent text PRIMARY KEY,
        version bigint NOT NULL,
        status text NOT NULL,
        stop_reason text,
        policy jsonb NOT NULL,
        generation int NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL
    );

    CREATE TABLE backlog_tasks (
        agent text NOT NULL,
        task_key text NOT NULL,
        ordinal int NOT NULL,
        title text NOT NULL,
        spec jsonb,
        state text NOT NULL,
        attempts int NOT NULL DEFAULT 0,
        max_attempts int NOT NULL,
        launches int NOT NULL DEFAULT 0,
        last_error text,
        run_id text,
        version bigint NOT NULL,
        enqueued_at timestamptz NOT NULL,
        started_at timestamptz,
        finished_at timestamptz,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (agent, task_key)
    );
    CREATE INDEX backlog_tasks_order_idx ON backlog_tasks (agent, ordinal);
    CREATE INDEX backlog_tasks_active_idx ON backlog_tasks (agent, ordinal)
        WHERE state IN ('running', 'paused', 'failed');

    -- What each agent is doing right now: its running and paused tasks, each run's live step.
    CREATE VIEW backlog_now AS
        SELECT t.agent, t.ordinal, t.task_key, t.title, t.state, t.attempts, t.max_attempts,
               t.run_id, r.status AS run_status, r.current_step_id, s.type AS step_type,
               s.name AS step_name, s.worker, s.lease_until, r.checkpoint,
               s.checkpoint AS step_checkpoint, t.updated_at
        FROM backlog_tasks t
        LEFT JOIN runs r ON r.run_id = t.run_id
        LEFT JOIN steps s ON s.run_id = t.run_id AND s.step_id = r.current_step_id
        WHERE t.state IN ('running', 'paused');

    -- The dead-letter list: tasks that used up their attempts, with the last error.
    CREATE VIEW backlog_dead_letters AS
        SELECT agent, ordinal, task_key, title, attempts, max_attempts, last_error, run_id,
               finished_at
        FROM backlog_tasks WHERE state = 'failed';
    """,
    # 4: the conversation, stored once per message instead of in every model call's input.
    """
    CREATE TABLE conversation (
        run_id text NOT NULL,
        idx int NOT NULL,
        message jsonb NOT NULL,
        PRIMARY KEY (run_id, idx)
    );
    """,
    # 5: metrics: one row per run, per model or tool call, per approval; `agentledger stats`
    # aggregates them over a window, and the *_failures views are the all-time summaries.
    """
    -- Per run: outcome, wall-clock duration, cost, retries, attempts lost with their worker
    -- (an attempt left 'running' that a later attempt of its step replaced), duplicates the
    -- ledger stopped. LATERAL subqueries let a filter on created_at narrow the runs first.
    CREATE VIEW metrics_runs AS
        SELECT r.run_id, r.tenant, r.status,
               r.status IN ('completed', 'failed', 'cancelled') AS finished,
               r.created_at, r.finished_at,
               extract(epoch FROM r.finished_at - r.created_at)::float8 AS duration_seconds,
               r.cost_usd::float8 AS cost_usd, r.tokens_in + r.tokens_out AS tokens,
               coalesce(a.retries, 0) AS retries, coalesce(a.lost_attempts, 0) AS lost_attempts,
               coalesce(l.duplicates_prevented, 0) AS duplicates_prevented
        FROM runs r
        LEFT JOIN LATERAL (
            SELECT count(*) FILTER (WHERE attempt > 1) AS retries,
                   count(*) FILTER (WHERE status = 'running' AND attempt < last_attempt)
                       AS lost_attempts
            FROM (SELECT attempt, status,
                         max(attempt) OVER (PARTITION BY step_id) AS last_attempt
                  FROM step_attempts WHERE run_id = r.run_id) sa
        ) a ON true
        LEFT JOIN LATERAL (
            SELECT sum(duplicates_prevented)::bigint AS duplicates_prevented
            FROM tool_ledger WHERE run_id = r.run_id
        ) l ON true;

    -- Per model or tool call (a step): its attempts, the failed ones, the lost ones, and
    -- whether the call itself ended failed. `name` is the tool, or the model the step names.
    CREATE VIEW metrics_calls AS
        SELECT s.run_id, r.created_at AS run_created_at, s.step_id, s.type, s.name, s.status,
               s.final, coalesce(a.attempts, 0) AS attempts,
               coalesce(a.failed_attempts, 0) AS failed_attempts,
               coalesce(a.lost_attempts, 0) AS lost_attempts,
               s.final AND s.status = 'failed' AS failed
        FROM steps s
        JOIN runs r USING (run_id)
        LEFT JOIN LATERAL (
            SELECT count(*) AS attempts,
                   count(*) FILTER (WHERE status = 'failed') AS failed_attempts,
                   count(*) FILTER (WHERE status = 'running' AND attempt < last_attempt)
                       AS lost_attempts
            FROM (SELECT attempt, status, max(attempt) OVER () AS last_attempt
                  FROM step_attempts WHERE run_id = s.run_id AND step_id = s.step_id) sa
        ) a ON true
        WHERE s.type IN ('model_call', 'tool_call');

    CREATE VIEW metrics_tool_failures AS
        SELECT name AS tool, count(*) AS calls, sum(failed_attempts)::bigint AS failed_attempts,
               count(*) FILTER (WHERE failed) AS failed_calls
        FROM metrics_calls WHERE type = 'tool_call' GROUP BY name;

    CREATE VIEW metrics_model_failures AS
        SELECT name AS model, count(*) AS calls, sum(failed_attempts)::bigint AS failed_attempts,
               count(*) FILTER (WHERE failed) AS failed_calls
        FROM metrics_calls WHERE type = 'model_call' GROUP BY name;

    -- Per decided or expired approval: how long the run waited for a person.
    CREATE VIEW metrics_approval_waits AS
        SELECT s.run_id, r.created_at AS run_created_at, s.step_id, s.name AS tool,
               s.input->>'kind' AS kind, s.status AS decision,
               extract(epoch FROM s.finished_at - s.started_at)::float8 AS wait_seconds
        FROM steps s JOIN runs r USING (run_id)
        WHERE s.type = 'approval' AND s.final AND s.finished_at IS NOT NULL;
    """,
    # 6: secret values tools marked, sealed (nonce + AES-256-GCM); everything else holds
    # only their markers (agentledger.store.vault).
    """
    CREATE TABLE secret_values (
        run_id text NOT NULL,
        secret_id text NOT NULL,
        key_id text NOT NULL,
        sealed bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, secret_id)
    );
    """,
    # 7: fences for workflow-written rows: the history length the write was made at. A
    # workflow task that was lost (its worker died before reporting it) may already have
    # written rows; its re-run, which Temporal accepts, writes them again at a greater
    # length and wins, whatever order the two writes land in.
    """
    ALTER TABLE runs ADD COLUMN fence bigint NOT NULL DEFAULT 0;
    ALTER TABLE steps ADD COLUMN fence bigint NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN fence bigint NOT NULL DEFAULT 0;
    """,
    # 8: which tools the workers on each task queue have (agentledger.store.tool_sets).
    """
    CREATE TABLE worker_tool_sets (
        task_queue text NOT NULL,
        worker text NOT NULL,
        fingerprint text NOT NULL,
        tools jsonb NOT NULL,
        seen_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (task_queue, worker)
    );
    """,
    # 9: forks: a run started from another's recorded steps (`agentledger fork`); both
    # receipts name each other through this table.
    """
    CREATE TABLE run_forks (
        fork_run_id text PRIMARY KEY,
        parent_run_id text NOT NULL,
        from_step int NOT NULL,
        edited boolean NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX run_forks_parent_idx ON run_forks (parent_run_id);
    """,
    # 10: `list` and `stats --since` read runs newest first or from a date; and the mirror
    # writes Postgres refused for their data (no retry helps), so `mirror check` names them.
    """
    CREATE INDEX runs_created_idx ON runs (created_at DESC);

    CREATE TABLE mirror_failures (
        run_id text NOT NULL,
        target text NOT NULL,
        fence bigint NOT NULL,
        error text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, target, fence)
    );
    """,
    # 11: tenants' shares and limits (agentledger.store.tenant_store), each run's admission queue
    # place, and each run's priority.
    """
    CREATE TABLE tenants (
        tenant text PRIMARY KEY,
        weight double precision NOT NULL DEFAULT 1 CHECK (weight > 0),
        max_in_flight int CHECK (max_in_flight > 0),
        max_queued int CHECK (max_queued >= 0),
        model_calls_per_second double precision CHECK (model_calls_per_second > 0),
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE tenant_queue (
        tenant text NOT NULL,
        run_id text NOT NULL,
        seq bigint NOT NULL,
        state text NOT NULL CHECK (state IN ('waiting', 'admitted', 'released')),
        enqueued_at timestamptz,
        admitted_at timestamptz,
        released_at timestamptz,
        PRIMARY KEY (tenant, run_id)
    );
    CREATE VIEW tenant_queue_positions AS
        SELECT tenant, run_id, seq, enqueued_at,
               row_number() OVER (PARTITION BY tenant ORDER BY seq) AS position
        FROM tenant_queue WHERE state = 'waiting';
    ALTER TABLE runs ADD COLUMN priority smallint;
    """,
    # 12: the agent profile each run came from (agentledger.profiles): its name and hash.
    """
    ALTER TABLE runs ADD COLUMN agent text NOT NULL DEFAULT 'default';
    ALTER TABLE runs ADD COLUMN profile_hash text;
    """,
    # 13: approvers' public keys (agentledger.store.approver_store); runs copy them in at start.
    """
    CREATE TABLE approvers (
        key_id text PRIMARY KEY,
        name text NOT NULL,
        role text NOT NULL,
        tenant text,
        public_key text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 14: the priorities a tenant's runs may take (NULL: any), enforced by the start gate.
    """
    ALTER TABLE tenants ADD COLUMN allowed_priorities int[];
    """,
    # 15: API keys of the HTTP door (agentledger.store.api_key_store): a hash, never the key.
    """
    CREATE TABLE api_keys (
        key_id text PRIMARY KEY,
        tenant text NOT NULL,
        role text NOT NULL,
        key_hash text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz,
        revoked_at timestamptz
    );
    """,
    # 16: eval cases (agentledger.store.eval_store): the recording each case's run is answered
    # from, which recorded call answered which step, and the first divergence.
    """
    CREATE TABLE eval_cases (
        run_id text PRIMARY KEY,
        eval_id text NOT NULL,
        case_name text NOT NULL,
        recording jsonb NOT NULL,
        live_read_only boolean NOT NULL DEFAULT false,
        answered jsonb NOT NULL DEFAULT '{}',
        divergence jsonb,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 17: an API key's optional name (`keys create --name`), a label for people.
    """
    ALTER TABLE api_keys ADD COLUMN name text;
    """,
    # 18: signed webhooks (agentledger.store.webhook_store): where to deliver (a task's A2A
    # push configs; a tenant's, with no run) and every delivery with its attempts; and the
    # A2A context each task was started in.
    """
    CREATE TABLE webhook_subscriptions (
        subscription_id text PRIMARY KEY,
        tenant text NOT NULL,
        run_id text,
        name text NOT NULL,
        url text NOT NULL,
        secret text NOT NULL,
        auth_scheme text,
        auth_credentials text,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX webhook_subscriptions_run_idx ON webhook_subscriptions (tenant, run_id);
    CREATE TABLE webhook_deliveries (
        delivery_id text PRIMARY KEY,
        subscription_id text NOT NULL,
        tenant text NOT NULL,
        run_id text,
        event text NOT NULL,
        body jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0,
        last_status_code integer,
        last_error text,
        created_at timestamptz NOT NULL DEFAULT now(),
        attempted_at timestamptz,
        delivered_at timestamptz
    );
    CREATE INDEX webhook_deliveries_subscription_idx
        ON webhook_deliveries (subscription_id, created_at);
    CREATE TABLE a2a_tasks (
        run_id text PRIMARY KEY,
        tenant text NOT NULL,
        context_id text NOT NULL,
        agent text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX a2a_tasks_context_idx ON a2a_tasks (tenant, context_id);
    """,
    # 19: the operator's policy for a tenant's runs (agentledger.core.policy_rules: agents,
    # free-form specs, approval rules), the approval roles a key decides in beside its role,
    # who asked for each run, and the request each idempotency key named
    # (agentledger.store.run_requests).
    """
    ALTER TABLE tenants ADD COLUMN policy jsonb;
    ALTER TABLE api_keys ADD COLUMN approval_roles text[] NOT NULL DEFAULT '{}';
    ALTER TABLE runs ADD COLUMN requester jsonb;
    CREATE TABLE run_requests (
        run_id text PRIMARY KEY,
        tenant text NOT NULL,
        fingerprint text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    """,
    # 20: a model call's streamed text, per attempt, as its watchers were sent it
    # (agentledger.store.model_text): what a watcher that joins late or comes back reads.
    """
    CREATE TABLE model_text (
        run_id text NOT NULL,
        step_id text NOT NULL,
        attempt int NOT NULL,
        text text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, step_id, attempt)
    );
    """,
    # 21: budgets above a run (agentledger.store.budget_store): each tenant's or
    # credential's limit per day or month; the model calls admitted and not yet landed
    # (holds); the alerts raised once per period; and whom each journaled response is
    # charged to (the journal is the ledger of what was paid). `budget_exhausted` is a run's
    # end like the other three. And the double-texting policies a tenant's callers may ask
    # for a message.
    """
    CREATE TABLE budgets (
        tenant text NOT NULL,
        subject text NOT NULL DEFAULT '',
        period text NOT NULL CHECK (period IN ('day', 'month')),
        usd numeric(14, 6) CHECK (usd > 0),
        tokens bigint CHECK (tokens > 0),
        mode text NOT NULL CHECK (mode IN ('advisory', 'enforcing')),
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant, subject, period),
        CHECK (usd IS NOT NULL OR tokens IS NOT NULL)
    );
    CREATE TABLE budget_holds (
        run_id text NOT NULL,
        step_id text NOT NULL,
        tenant text NOT NULL,
        charged_to text,
        tokens bigint NOT NULL DEFAULT 0,
        usd numeric(14, 6) NOT NULL DEFAULT 0,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (run_id, step_id)
    );
    CREATE INDEX budget_holds_tenant_idx ON budget_holds (tenant, expires_at);
    CREATE TABLE budget_alerts (
        tenant text NOT NULL,
        subject text NOT NULL,
        period text NOT NULL,
        period_start timestamptz NOT NULL,
        kind text NOT NULL CHECK (kind IN ('warning', 'exceeded')),
        spent_usd numeric(14, 6) NOT NULL,
        spent_tokens bigint NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        notified_at timestamptz,
        PRIMARY KEY (tenant, subject, period, period_start, kind)
    );
    ALTER TABLE tenants ADD COLUMN double_texting text[];
    ALTER TABLE model_journal ADD COLUMN tenant text;
    ALTER TABLE model_journal ADD COLUMN charged_to text;
    ALTER TABLE model_journal ADD COLUMN agent text;
    CREATE INDEX model_journal_tenant_idx ON model_journal (tenant, created_at);

    DROP INDEX runs_active_idx;
    CREATE INDEX runs_active_idx ON runs (status)
        WHERE status NOT IN ('completed', 'failed', 'cancelled', 'budget_exhausted');
    CREATE OR REPLACE VIEW active_steps AS
        SELECT r.run_id, r.tenant, r.status AS run_status, s.step_id, s.type, s.name,
               s.status AS step_status, s.attempt, s.worker, s.lease_until
        FROM runs r JOIN steps s USING (run_id)
        WHERE r.status NOT IN ('completed', 'failed', 'cancelled', 'budget_exhausted')
          AND NOT s.final;
    CREATE OR REPLACE VIEW metrics_runs AS
        SELECT r.run_id, r.tenant, r.status,
               r.status IN ('completed', 'failed', 'cancelled', 'budget_exhausted') AS finished,
               r.created_at, r.finished_at,
               extract(epoch FROM r.finished_at - r.created_at)::float8 AS duration_seconds,
               r.cost_usd::float8 AS cost_usd, r.tokens_in + r.tokens_out AS tokens,
               coalesce(a.retries, 0) AS retries, coalesce(a.lost_attempts, 0) AS lost_attempts,
               coalesce(l.duplicates_prevented, 0) AS duplicates_prevented
        FROM runs r
        LEFT JOIN LATERAL (
            SELECT count(*) FILTER (WHERE attempt > 1) AS retries,
                   count(*) FILTER (WHERE status = 'running' AND attempt < last_attempt)
                       AS lost_attempts
            FROM (SELECT attempt, status,
                         max(attempt) OVER (PARTITION BY step_id) AS last_attempt
                  FROM step_attempts WHERE run_id = r.run_id) sa
        ) a ON true
        LEFT JOIN LATERAL (
            SELECT sum(duplicates_prevented)::bigint AS duplicates_prevented
            FROM tool_ledger WHERE run_id = r.run_id
        ) l ON true;
    """,
    # 22: triggers: schedules (each a Temporal Schedule; listed here) and
    # what became of each fire time; webhook triggers (`POST /v1/hooks/NAME`) and each
    # delivery they took; and who may make a tenant's schedules (runner or admin).
    """
    CREATE TABLE schedules (
        tenant text NOT NULL,
        name text NOT NULL,
        agent text NOT NULL,
        task text NOT NULL,
        request jsonb NOT NULL,
        created_by text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        paused boolean NOT NULL DEFAULT false,
        PRIMARY KEY (tenant, name)
    );
    CREATE TABLE schedule_fires (
        tenant text NOT NULL,
        schedule text NOT NULL,
        fired_at timestamptz NOT NULL,
        run_id text,
        outcome text NOT NULL CHECK (outcome IN ('started', 'skipped', 'ended')),
        reason text,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant, schedule, fired_at)
    );
    CREATE INDEX schedule_fires_run_idx ON schedule_fires (run_id);
    CREATE TABLE hooks (
        tenant text NOT NULL,
        name text NOT NULL,
        secret text NOT NULL,
        agent text NOT NULL,
        task_template text NOT NULL,
        spec jsonb NOT NULL,
        created_by text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant, name)
    );
    CREATE TABLE hook_deliveries (
        tenant text NOT NULL,
        hook text NOT NULL,
        delivery_id text NOT NULL,
        run_id text NOT NULL,
        received_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant, hook, delivery_id)
    );
    ALTER TABLE tenants ADD COLUMN schedule_role text CHECK (schedule_role IN ('runner', 'admin'));
    """,
    # 23: standing approvals (agentledger.store.standing_store): rules approvers granted
    # instead of single decisions, kept after they are revoked or expire.
    """
    CREATE TABLE standing_approvals (
        rule_id text PRIMARY KEY,
        tenant text NOT NULL,
        tool text NOT NULL,
        condition text,
        run_id text,
        agent text,
        granted_by jsonb NOT NULL,
        granter_roles text[] NOT NULL DEFAULT '{}',
        granted_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        revoked_at timestamptz,
        revoked_by jsonb
    );
    CREATE INDEX standing_approvals_live_idx ON standing_approvals (tenant, tool)
        WHERE revoked_at IS NULL;
    """,
    # 24: what a webhook's deliveries carry: agentledger's JSON body, or a Slack message.
    """
    ALTER TABLE webhook_subscriptions ADD COLUMN format text NOT NULL DEFAULT 'json'
        CHECK (format IN ('json', 'slack'));
    """,
]


async def apply_migrations(conn: AsyncConnection[Any]) -> int:
    """Apply every migration not yet applied; returns the schema version.

    A schema already at this code's version is left alone, without a statement of DDL, so a
    worker whose role may not change the schema starts on a migrated database; on one that
    lags, the role's refusal becomes a SetupError that says to run `agentledger migrate`."""
    current = await schema_version(conn)
    if current >= len(MIGRATIONS):
        return len(MIGRATIONS)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            row = await cur.fetchone()
            current = int(row[0]) if row else 0
            for version, sql in enumerate(MIGRATIONS[current:], start=current + 1):
                await conn.execute(sql)  # type: ignore[arg-type]
                await conn.execute(
                    "INSERT INTO schema_migrations (version) VALUES (%s)", (version,)
                )
    except psycopg.errors.InsufficientPrivilege as err:
        raise SetupError(
            f"the database's schema is at version {current}, this code needs "
            f"{len(MIGRATIONS)}, and role {conn.info.user!r} may not change it "
            f"({_first_line(err)}): run `agentledger migrate` with a role that may (the schema's "
            "owner), then start again"
        ) from err
    return len(MIGRATIONS)


# `CREATE TABLE|INDEX IF NOT EXISTS name`: a tool's statement whose object may already exist.
_CREATES = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+([\w.\"]+)", re.I
)


async def install_tool_schema(pool: AsyncConnectionPool, statements: list[str]) -> None:
    """Create the tables a worker's tools declare (`Tool.schema`), under the migration lock so
    workers starting together do not race; the statements are idempotent. A statement whose
    table or index exists is not sent (Postgres checks the right to create before it looks),
    so a role without DDL rights starts where `agentledger migrate` made them."""
    if not statements:
        return
    async with pool.connection() as conn:
        missing = []
        for sql in statements:
            found = _CREATES.match(sql)
            if found:
                cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (found[1],))
                row = await cur.fetchone()
                if row and row[0]:
                    continue
            missing.append(sql)
        if not missing:
            return
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                for sql in missing:
                    await conn.execute(sql)  # type: ignore[arg-type]
        except psycopg.errors.InsufficientPrivilege as err:
            raise SetupError(
                f"the tools' tables are missing and role {conn.info.user!r} may not create "
                f"them ({_first_line(err)}): run `agentledger migrate` (AGENTLEDGER_TOOLS set as "
                "for the workers) with a role that may, then start again"
            ) from err


# A statement is prepared on the server the second time a connection runs it (psycopg's
# default waits for the sixth): the mirror's and the ledger's few statements then cost a
# Bind/Execute, not a parse and plan, each time. Not the first: a script of several
# statements (a migration) cannot be prepared, and psycopg learns that from its first run.
PREPARE_THRESHOLD = 1
RECONNECT_SECONDS = 5.0
WAIT_SECONDS = 5.0
# Connections beyond one per activity slot: headroom, so an activity seldom waits for its
# one. None waits for a second while it holds one (see commit_pool_beside), but a tool call
# with an external effect: it holds its key's lock on one (ledger.locked), taken first, while
# it waits for its working one; no holder of a working connection waits for a lock's, so the
# wait ends when some call finishes.
RESERVED_CONNECTIONS = 4
# The commit pool's size (commit_pool_beside): its statements are short, so two serve a
# worker's checkpoints and lease renewals.
COMMIT_CONNECTIONS = 2


def pool_size_for(activity_slots: int) -> int:
    """A worker's pool: one connection per activity slot, plus the reserve."""
    return activity_slots + RESERVED_CONNECTIONS


def activity_slots_for(pool: AsyncConnectionPool, wanted: int) -> int:
    """The activity slots a pool can serve without starving: its size minus the reserve."""
    return max(1, min(wanted, pool.max_size - RESERVED_CONNECTIONS))


class _StorableText(StrDumperUnknown):
    def dump(self, obj: str) -> Buffer | None:
        return super().dump(escape_nul(obj) if NUL in obj else obj)


class _StorableBinaryText(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        return super().dump(escape_nul(obj) if NUL in obj else obj)


async def make_storable(conn: AsyncConnection[Any]) -> None:
    """Every string this connection writes, as text or inside JSON, is one Postgres accepts
    (see agentledger.core.storable)."""
    # The last registered serves `%s`: text with the unknown oid, as psycopg's default.
    conn.adapters.register_dumper(str, _StorableBinaryText)
    conn.adapters.register_dumper(str, _StorableText)
    set_json_dumps(json_dumps, context=conn)


async def schema_version(conn: AsyncConnection[Any]) -> int:
    """The version the database's schema is at; 0 before the first migration."""
    try:
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
    except psycopg.errors.UndefinedTable:
        return 0
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def check_schema(conn: AsyncConnection[Any]) -> None:
    """Refuse, saying how to fix it, a database whose schema lags this code's."""
    version = await schema_version(conn)
    if version < len(MIGRATIONS):
        raise SetupError(
            f"the database's schema is at version {version}, this code needs {len(MIGRATIONS)}: "
            "run `agentledger migrate` (or start a worker, which migrates)"
        )


@asynccontextmanager
async def transaction_if_used(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """One transaction around the body, that costs nothing when the body sends nothing.

    `conn.transaction()` sends BEGIN and COMMIT, two round trips, whether or not anything
    ran between them; most tool calls never touch the connection they are given. Here the
    connection leaves autocommit, so the body's first statement opens the transaction, which
    commits at the end (rolls back on an error); a body that sent nothing sends nothing. A
    connection left in any other state is closed, so the pool drops it.
    """
    await conn.set_autocommit(False)
    try:
        yield
        if conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.commit()
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()
        raise
    finally:
        if not conn.closed:
            if conn.info.transaction_status == TransactionStatus.IDLE:
                await conn.set_autocommit(True)
            else:
                await conn.close()


@asynccontextmanager
async def pipelined_transaction(conn: AsyncConnection[Any]) -> AsyncIterator[AsyncPipeline]:
    """One transaction whose BEGIN, statements and COMMIT go out together: one round trip.

    `conn.transaction()` inside a pipeline syncs with the server where it begins and where
    it ends, two round trips this spares by sending BEGIN and COMMIT as statements of the
    pipeline (the bench's figures show what that spares). An error in the body (the server's
    or ours) leaves the transaction uncommitted: it is rolled back, or the connection closed
    so that the pool drops it. `pipeline.sync()` in the body makes the server run what was
    sent so far, still uncommitted.
    """
    try:
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN")
            yield pipeline
            await conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            try:
                await conn.rollback()
            except BaseException:
                await conn.close()
                raise
        raise


class StatementBoundPool(AsyncConnectionPool):
    """A command's pool: each checkout is one transaction whose statements Postgres cancels
    after `statement_ms`, so a read behind a lock cannot hold the command past its bound.

    The bound is set inside the transaction (`SET LOCAL`), not as a startup parameter
    (`options`), which PgBouncer refuses by default and drops when told to ignore it; a
    transaction is what a pooler in transaction mode keeps on one server connection."""

    def __init__(self, *args: Any, statement_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statement_ms = statement_ms

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (the signature it overrides)
    ) -> AsyncIterator[AsyncConnection[Any]]:
        async with super().connection(timeout) as conn, conn.transaction():
            await conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (str(self.statement_ms),)
            )
            yield conn


def unopened_pool(
    database_url: AsyncConninfoParam,
    max_size: int,
    *,
    prepared_statements: bool = True,
    statement_seconds: float | None = None,
) -> AsyncConnectionPool:
    """A pool as every entry point configures it, not yet open. Without
    `prepared_statements` (AGENTLEDGER_PREPARED_STATEMENTS=0) nothing is prepared on the server:
    a pooler in transaction mode (PgBouncer) hands each transaction to any server
    connection, where a statement prepared on another is unknown. With `statement_seconds`
    (a command's `--wait`), Postgres cancels a statement that runs longer (see
    StatementBoundPool)."""
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "prepare_threshold": PREPARE_THRESHOLD if prepared_statements else None,
    }
    # After an outage the pool must find the database again within seconds. Its reconnect
    # backoff doubles without bound, and a caller queued meanwhile waits out its whole
    # timeout; so both are short: a caller gives up, retries, and that starts a fresh try.
    options: dict[str, Any] = {
        "min_size": 1,
        "max_size": max_size,
        "open": False,
        "kwargs": kwargs,
        "timeout": WAIT_SECONDS,
        "reconnect_timeout": RECONNECT_SECONDS,
        "configure": make_storable,
    }
    if statement_seconds is None:
        return AsyncConnectionPool(database_url, **options)
    statement_ms = max(1, int(statement_seconds * 1000))
    return StatementBoundPool(database_url, statement_ms=statement_ms, **options)


def commit_pool_beside(pool: AsyncConnectionPool) -> AsyncConnectionPool:
    """A small pool of its own for the short commits an activity makes while it holds a
    connection of `pool` (a tool's transaction): its mid-step checkpoints and lease renewals.
    Nothing holds one of these while waiting for another connection, so a holder of `pool`
    waiting here always gets one. Not yet open."""
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    prepared = kwargs.get("prepare_threshold") is not None
    return unopened_pool(pool.conninfo, COMMIT_CONNECTIONS, prepared_statements=prepared)


async def open_pool(
    database_url: str,
    *,
    max_size: int = 10,
    connect_seconds: float = 30,
    connect_ends_at: float | None = None,
    migrate: bool = True,
    prepared_statements: bool = True,
    statement_seconds: float | None = None,
) -> AsyncConnectionPool:
    """Open a pool on the database, migrating it first, or (`migrate=False`) refusing it if
    its schema lags. Every entry point that touches Postgres opens its pool here; a
    command's (`statement_seconds`) bounds each statement too.

    The first connection and the schema check are made here (`ready_schema`); the pool opens
    only once a connection has answered."""
    await ready_schema(
        database_url,
        connect_seconds=connect_seconds,
        connect_ends_at=connect_ends_at,
        migrate=migrate,
    )
    pool = unopened_pool(
        database_url,
        max_size,
        prepared_statements=prepared_statements,
        statement_seconds=statement_seconds,
    )
    await pool.open(wait=False)
    return pool


async def ready_schema(
    database_url: str,
    *,
    connect_seconds: float = 30,
    connect_ends_at: float | None = None,
    migrate: bool = True,
) -> None:
    """Migrate the database (or, `migrate=False`, refuse it if its schema lags) over one
    connection of its own, under one deadline of `connect_seconds`, or sooner if a command's
    bound ends (`connect_ends_at`, see agentledger.core.set_up_bound): a Postgres that accepts
    and never answers is named within it (the pool's own connect would wait out libpq's
    timeout, and its close that one)."""
    try:
        async with asyncio.timeout(seconds_left(connect_seconds, connect_ends_at)):
            conn = await AsyncConnection.connect(
                database_url, autocommit=True, prepare_threshold=None
            )
    except (TimeoutError, psycopg.OperationalError) as err:
        refused = _refused_setting(err)
        if refused:
            raise SetupError(
                f"invalid setting: DATABASE_URL: the server at {redact(database_url)} "
                f"answered but refused it ({refused}): fix DATABASE_URL (or create what it "
                "names), then run `agentledger migrate`"
            ) from err
        why = "no answer" if isinstance(err, TimeoutError) else _first_line(err)
        raise ServiceUnreachable(
            f"cannot reach Postgres at {redact(database_url)} within "
            f"{connect_seconds:g}s ({why}): check DATABASE_URL, or start the local "
            "stack with `agentledger up`"
        ) from err
    try:
        async with asyncio.timeout(
            None if migrate else seconds_left(connect_seconds, connect_ends_at)
        ):
            if migrate:
                await apply_migrations(conn)
            else:
                await check_schema(conn)
    except TimeoutError as err:
        raise ServiceUnreachable(
            f"Postgres at {redact(database_url)} did not answer within "
            f"{connect_seconds:g}s: check that it is up, or wait longer with --wait"
        ) from err
    finally:
        await conn.close()


# A server that answers and refuses what DATABASE_URL names: the setting's fault, not an outage.
_REFUSED_SETTING = re.compile(
    r"FATAL:\s+((?:database|role) \"[^\"]*\" does not exist"
    r"|password authentication failed for user \"[^\"]*\")"
)


def _refused_setting(err: Exception) -> str | None:
    found = _REFUSED_SETTING.search(str(err))
    return found[1] if found else None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def redact(database_url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", database_url)
