"""agentrun: durable runs for AI agents on Temporal, mirrored to Postgres."""
