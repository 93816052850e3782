"""The local development stack: the embedded Temporal dev server and Postgres, and the
offline OpenAI-compatible model. For `agentledger up`/`demo` and the tests; never imported
by a worker in production.
"""
