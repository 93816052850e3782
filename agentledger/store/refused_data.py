"""Postgres refusing the values themselves (out of range, a broken constraint): the same write
fails however often it is retried, so an activity meeting it fails at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from temporalio.exceptions import ApplicationError

from agentledger.core.errors import DATA_REFUSED

REFUSED_DATA_ERRORS = (psycopg.DataError, psycopg.IntegrityError)


@contextlib.contextmanager
def refused_data_is_final() -> Iterator[None]:
    """Around an activity: Postgres refusing its data fails it at once, never retried."""
    try:
        yield
    except REFUSED_DATA_ERRORS as err:
        raise ApplicationError(
            f"Postgres refused the data ({type(err).__name__}): {err}; no retry changes it",
            type=DATA_REFUSED,
            non_retryable=True,
        ) from err
