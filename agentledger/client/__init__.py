"""The client side: what people and programs do with runs, backlogs, tenants and builds,
one class per feature (`Runs`, `Backlogs`, ...), each built on one `Scope` (the caller,
the wait bound, the connections) and returning typed models. `RunClient` holds the
connections and offers the classes; the CLI and the HTTP server are thin faces over them.
Nothing here imports the worker.
"""
