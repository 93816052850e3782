"""Benchmarks: what durability costs, side by side with bare Temporal and a Postgres queue.

`python bench/run.py` runs them all against a fresh embedded stack and prints the figures;
nothing here asserts on speed.
"""
