"""The pure core: models, states, errors, keys, settings and the constants of the contract.

Imports no other agentledger layer and does no I/O when imported, so workflow code may use it
(it is what the workflow sandbox passes through). Everything above depends on it.
"""
