"""What a model provider's failure means to Temporal, read as the OpenAI SDK reads it: what the
SDK would retry is retried by Temporal after the delay the provider asks for; the rest is final.
(SDK clients are built with max_retries=0, so Temporal alone owns retries.)"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime, timedelta

import openai
from temporalio.exceptions import ApplicationError

from agentledger.core.errors import (
    BAD_REQUEST,
    PERMISSION_DENIED,
    PROVIDER_UNAVAILABLE,
    RATE_LIMITED,
)


def retry_after(err: openai.APIStatusError) -> timedelta | None:
    """The delay the provider asks for, read as the OpenAI SDK reads it: `retry-after-ms`
    first, then `retry-after` in seconds, then `retry-after` as an HTTP date."""
    headers = err.response.headers
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(header)
        if raw is None:
            continue
        try:
            seconds = float(raw) / divisor
        except ValueError:
            continue
        return timedelta(seconds=seconds) if math.isfinite(seconds) and seconds >= 0 else None
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when - datetime.now(UTC), timedelta(0))


# Statuses the OpenAI SDK itself retries (besides every 5xx): request timeout, lock timeout,
# rate limit. Its `x-should-retry` header overrides the status either way.
TRANSIENT_STATUSES = frozenset({408, 409, 429})


def provider_says_retry(err: openai.APIStatusError) -> bool:
    """Whether the OpenAI SDK would try this response again: `x-should-retry: true` or
    `false` decides; else 408, 409, 429 and every 5xx are transient, the rest final."""
    said = err.response.headers.get("x-should-retry")
    if said == "true":
        return True
    if said == "false":
        return False
    return err.status_code in TRANSIENT_STATUSES or err.status_code >= 500


def classify_model_error(err: Exception) -> ApplicationError:
    """Turn an `openai` exception into the ApplicationError Temporal should act on: what the
    OpenAI SDK treats as transient is retried by Temporal after the delay the provider asks
    for; the rest fails the call at once."""
    if not isinstance(err, openai.APIStatusError):
        # Timeouts and dropped connections: worth another try, with backoff.
        return ApplicationError(f"model provider unavailable: {err}", type=PROVIDER_UNAVAILABLE)
    retry = provider_says_retry(err)
    delay = retry_after(err) if retry else None
    said = err.response.headers.get("x-should-retry")
    told = f" (x-should-retry: {said})" if said in ("true", "false") else ""
    status = err.status_code
    if status == 429:
        message, kind = f"model provider rate limited the call{told}: {err}", RATE_LIMITED
    elif retry:
        message, kind = (
            f"model provider unavailable ({status}){told}: {err}",
            PROVIDER_UNAVAILABLE,
        )
    elif status >= 500:
        message, kind = f"model provider failed ({status}){told}: {err}", PROVIDER_UNAVAILABLE
    elif isinstance(err, openai.AuthenticationError | openai.PermissionDeniedError):
        message, kind = (
            f"model provider refused the credentials ({status}): check "
            "OPENAI_API_KEY and the model's access",
            PERMISSION_DENIED,
        )
    else:
        message, kind = f"model provider rejected the request ({status}){told}: {err}", BAD_REQUEST
    return ApplicationError(message, type=kind, non_retryable=not retry, next_retry_delay=delay)
