"""Activities: every piece of I/O a run does. Each is a method on a class holding its clients.

Import each from its module (`agentledger.activities.model` and so on): this package imports
nothing itself, so a client that imports the workflows (the CLI) loads no model SDK.
"""
