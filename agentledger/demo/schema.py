"""The demo's own tables, outside agentledger's migrations: every worker with the demo's tools
creates them when it starts (`Tool.schema`); the statements are idempotent."""

# Messages the demo agent sent: written inside the ledger's transaction, so anyone can
# count in SQL how many messages a run really sent.
OUTBOX = """
CREATE TABLE IF NOT EXISTS outbox (
    id bigserial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    run_id text NOT NULL,
    step_id text NOT NULL,
    recipient text NOT NULL,
    subject text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""

# A stand-in for an external help desk: its writes do not share the ledger's transaction.
TICKETS = """
CREATE TABLE IF NOT EXISTS tickets (
    id bigserial PRIMARY KEY,
    external_key text NOT NULL UNIQUE,
    title text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""

# Refunds the demo agent paid: written inside the ledger's transaction, so a refund and its
# record are one, and a retried call cannot pay twice.
REFUNDS = """
CREATE TABLE IF NOT EXISTS refunds (
    id bigserial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    run_id text NOT NULL,
    order_id bigint NOT NULL,
    cents bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
