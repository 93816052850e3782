"""Every failure gets one classification here; Temporal alone owns retries.

SDK clients are built with max_retries=0, and activities raise ApplicationErrors whose
`non_retryable` flag and `next_retry_delay` tell Temporal what to do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta

import openai
import psycopg
from temporalio.exceptions import ApplicationError

# Error types a run treats as final; listed so workflows can recognise them.
PERMISSION_DENIED = "PermissionDenied"
BAD_REQUEST = "BadRequest"
RATE_LIMITED = "RateLimited"
PROVIDER_UNAVAILABLE = "ProviderUnavailable"
UNKNOWN_TOOL = "UnknownTool"
# A payload over Temporal's blob size limit (agentrun.payload_limits): no retry sends less.
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
# Postgres refused the values themselves (out of range, a broken constraint): the same write
# fails however often it is retried.
DATA_REFUSED = "DataRefused"
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


def retry_after(err: openai.APIStatusError) -> timedelta | None:
    raw = err.response.headers.get("retry-after")
    try:
        return timedelta(seconds=float(raw)) if raw is not None else None
    except ValueError:
        return None


def classify_model_error(err: Exception) -> ApplicationError:
    """Turn an `openai` exception into the ApplicationError Temporal should act on."""
    if isinstance(err, openai.RateLimitError):
        return ApplicationError(
            f"model provider rate limited the call: {err}",
            type=RATE_LIMITED,
            next_retry_delay=retry_after(err),
        )
    if isinstance(err, openai.AuthenticationError | openai.PermissionDeniedError):
        return ApplicationError(
            f"model provider refused the credentials ({err.status_code}): check "
            "OPENAI_API_KEY and the model's access",
            type=PERMISSION_DENIED,
            non_retryable=True,
        )
    if isinstance(err, openai.APIStatusError) and 400 <= err.status_code < 500:
        return ApplicationError(
            f"model provider rejected the request ({err.status_code}): {err}",
            type=BAD_REQUEST,
            non_retryable=True,
        )
    # 5xx, timeouts and dropped connections: worth another try, with backoff.
    return ApplicationError(f"model provider unavailable: {err}", type=PROVIDER_UNAVAILABLE)
