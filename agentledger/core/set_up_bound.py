"""How long a connection may take to set up when a command's `--wait` began before it.

A command's bound counts from its start: importing the client alone can take a second or more
on a busy machine, and Temporal and Postgres are connected one after the other. So each set-up
waits at most its own seconds and never past the command's end (`time.monotonic()`), but
always a second, a fair try for a server that answers; messages name the seconds the
user asked for.
"""

from __future__ import annotations

import time

ONE_TRY_SECONDS = 1.0


def seconds_left(seconds: float, ends_at: float | None) -> float:
    """`seconds`, or less if the bound ending at `ends_at` comes sooner."""
    if ends_at is None:
        return seconds
    return min(seconds, max(ends_at - time.monotonic(), ONE_TRY_SECONDS))
