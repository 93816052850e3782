"""Client operations: start, steer and inspect runs, backlogs, forks and tenants through
Temporal (and read the Postgres mirror). Above the workflows, whose handles they use; below
the CLI, which only parses, calls one of these and prints.
"""
