"""The client-operations layer's services: `RunClient`'s operations grouped as the CLI
groups its commands (`client.runs`, `client.backlogs`, `client.tenants`, ...). Beside
agentledger/ops, whose policy each service calls; each is built on one `ClientSession` that
resolves the caller's tenant and the connections once, so no operation threads them.
"""
