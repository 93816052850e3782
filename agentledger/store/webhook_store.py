"""Signed webhooks in Postgres: where to deliver (subscriptions) and what was delivered.

A subscription is a URL, the secret its deliveries are signed with
(agentledger.core.webhook_signatures), what they carry (`format`: agentledger's JSON, or
a Slack message) and optionally the credentials sent with them; it
belongs to a tenant and, for an A2A task's push config, to one run. The secret stays here:
Temporal's history carries a subscription's id, never its secret. Every delivery is a row
keyed by its id, so a retried dispatch cannot record one twice; each attempt updates its
status (`pending`, `delivered`, `failed`), its attempt count and what the receiver last
answered.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.spec import JsonDict
from agentledger.core.webhook_models import DeliveryFormat

SUBSCRIPTION = "subscription_id, tenant, run_id, name, url, format, auth_scheme, created_at"
DELIVERY = (
    "delivery_id, subscription_id, tenant, run_id, event, status, attempts, last_status_code, "
    "last_error, created_at, attempted_at, delivered_at"
)


class WebhookStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ------------------------------------------------------------ subscriptions

    async def subscribe(
        self,
        *,
        subscription_id: str,
        tenant: str,
        run_id: str | None,
        name: str,
        url: str,
        secret: str,
        auth_scheme: str | None = None,
        auth_credentials: str | None = None,
        format: DeliveryFormat = "json",
    ) -> dict[str, Any]:
        """Add or replace a subscription (the same id: the caller's new settings)."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""INSERT INTO webhook_subscriptions (subscription_id, tenant, run_id, name,
                        url, secret, auth_scheme, auth_credentials, format)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (subscription_id) DO UPDATE SET url = EXCLUDED.url,
                        secret = EXCLUDED.secret, auth_scheme = EXCLUDED.auth_scheme,
                        auth_credentials = EXCLUDED.auth_credentials, format = EXCLUDED.format
                    RETURNING {SUBSCRIPTION}""",
                (
                    subscription_id,
                    tenant,
                    run_id,
                    name,
                    url,
                    secret,
                    auth_scheme,
                    auth_credentials,
                    format,
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            return row

    async def subscriptions(self, tenant: str, run_id: str | None) -> list[dict[str, Any]]:
        """The tenant's subscriptions to `run_id` (None: its tenant-wide ones)."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""SELECT {SUBSCRIPTION} FROM webhook_subscriptions
                    WHERE tenant = %s AND run_id IS NOT DISTINCT FROM %s
                    ORDER BY created_at, name""",
                (tenant, run_id),
            )
            return await cur.fetchall()

    async def notifies(self, tenant: str) -> bool:
        """Whether the tenant has a notification webhook (a subscription with no run)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT 1 FROM webhook_subscriptions
                   WHERE tenant = %s AND run_id IS NULL LIMIT 1""",
                (tenant,),
            )
            return await cur.fetchone() is not None

    async def unsubscribe(self, tenant: str, subscription_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM webhook_subscriptions WHERE tenant = %s AND subscription_id = %s",
                (tenant, subscription_id),
            )
            return cur.rowcount > 0

    async def target(self, subscription_id: str) -> dict[str, Any] | None:
        """Where and how to deliver: the URL, the secret, the format and the credentials;
        None once the subscription is gone (its deliveries stop)."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT subscription_id, tenant, url, secret, format, auth_scheme,
                       auth_credentials
                   FROM webhook_subscriptions WHERE subscription_id = %s""",
                (subscription_id,),
            )
            return await cur.fetchone()

    # ------------------------------------------------------------ deliveries

    async def attempt(
        self,
        *,
        delivery_id: str,
        subscription_id: str,
        tenant: str,
        run_id: str | None,
        event: str,
        body: JsonDict,
    ) -> int:
        """Record an attempt of this delivery (the row made on its first); its number."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO webhook_deliveries (delivery_id, subscription_id, tenant, run_id,
                       event, body, attempts, attempted_at)
                   VALUES (%s, %s, %s, %s, %s, %s, 1, now())
                   ON CONFLICT (delivery_id) DO UPDATE SET
                       attempts = webhook_deliveries.attempts + 1, attempted_at = now()
                   RETURNING attempts""",
                (delivery_id, subscription_id, tenant, run_id, event, Jsonb(body)),
            )
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    async def outcome(
        self,
        delivery_id: str,
        *,
        status: str,
        status_code: int | None,
        error: str | None,
    ) -> None:
        """What the attempt came to; a delivered one stays delivered."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE webhook_deliveries SET status = %s, last_status_code = %s,
                       last_error = %s,
                       delivered_at = CASE WHEN %s = 'delivered' THEN now() END
                   WHERE delivery_id = %s AND status <> 'delivered'""",
                (status, status_code, error, status, delivery_id),
            )

    async def deliveries(self, subscription_id: str) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""SELECT {DELIVERY} FROM webhook_deliveries WHERE subscription_id = %s
                    ORDER BY created_at""",
                (subscription_id,),
            )
            return await cur.fetchall()

    async def delivery(self, subscription_id: str, delivery_id: str) -> dict[str, Any] | None:
        """One delivery to the subscription, with the body it carried; None if it has none
        of that id."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""SELECT {DELIVERY}, body FROM webhook_deliveries
                    WHERE subscription_id = %s AND delivery_id = %s""",
                (subscription_id, delivery_id),
            )
            return await cur.fetchone()

    async def requeue(self, delivery_id: str) -> dict[str, Any]:
        """The delivery to be made again: pending, until its next attempt says otherwise."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""UPDATE webhook_deliveries SET status = 'pending', delivered_at = NULL
                    WHERE delivery_id = %s RETURNING {DELIVERY}""",
                (delivery_id,),
            )
            row = await cur.fetchone()
            assert row is not None
            return row

    # ------------------------------------------------------------ A2A tasks

    async def remember_task(self, run_id: str, tenant: str, context_id: str, agent: str) -> str:
        """The context the task was first started in (a later start keeps it)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO a2a_tasks (run_id, tenant, context_id, agent)
                   VALUES (%s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING""",
                (run_id, tenant, context_id, agent),
            )
            cur = await conn.execute(
                "SELECT context_id FROM a2a_tasks WHERE run_id = %s AND tenant = %s",
                (run_id, tenant),
            )
            row = await cur.fetchone()
            return str(row[0]) if row else context_id

    async def task_context(self, run_id: str, tenant: str) -> str | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT context_id FROM a2a_tasks WHERE run_id = %s AND tenant = %s",
                (run_id, tenant),
            )
            row = await cur.fetchone()
            return str(row[0]) if row else None

    async def context_tasks(self, tenant: str, context_id: str, agent: str) -> list[str]:
        """The agent's runs started in the tenant's context, oldest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT run_id FROM a2a_tasks
                   WHERE tenant = %s AND context_id = %s AND agent = %s
                   ORDER BY created_at, run_id""",
                (tenant, context_id, agent),
            )
            return [str(row[0]) for row in await cur.fetchall()]

    # ------------------------------------------------------------ what a run did

    async def events_after(
        self, run_id: str, after_seq: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The run's events after `after_seq`, as the mirror holds them, in order: the first
        `limit` of them."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT seq, type, step_id, data, created_at AS at FROM events
                   WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s""",
                (run_id, after_seq, limit),
            )
            return await cur.fetchall()

    async def receipt(self, run_id: str) -> JsonDict | None:
        """The run's receipt once it has ended; None before."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT receipt FROM receipts WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
            return None if row is None else dict(row[0])
