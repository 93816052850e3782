"""The stores: all SQL, the schema and its migrations (db.py), one class or module per table
family. Imports only the core; activities, the client operations and the CLI use them with
an injected pool.
"""
