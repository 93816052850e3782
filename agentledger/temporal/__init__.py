"""Temporal plumbing for clients: the connection, the payload codec (encryption), tracing,
worker deployments and the codec server. Imports only the core.
"""
