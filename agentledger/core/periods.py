"""Reading "24h", "7d", "2w" or an ISO date from the command line as a point in time, and
"90s", "30m", "24h", "7d" as a span of seconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """A span such as 30m, 24h, 7d, 2w (a bare number is days)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw]?)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not an age: write it like 30m, 24h, 7d or 2w")
    amount, unit = float(match[1]), match[2] or "d"
    return timedelta(**{UNITS[unit]: amount})


def parse_point(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO date or time (UTC unless it says otherwise), or an age counted back from now."""
    now = now or datetime.now(UTC)
    try:
        return now - parse_age(text)
    except ValueError:
        pass
    try:
        point = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO date (2025-01-31, 2025-01-31T12:00) nor an age "
            "(30m, 24h, 7d, 2w)"
        ) from None
    return point if point.tzinfo else point.replace(tzinfo=UTC)


_SPAN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*")
_SPAN_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def span_seconds(text: str) -> float:
    """A span such as 90s, 30m, 24h, 7d (a bare number is seconds), in seconds."""
    match = _SPAN.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a span: write it like 90s, 30m, 24h or 7d")
    return float(match[1]) * _SPAN_SECONDS[match[2]]
