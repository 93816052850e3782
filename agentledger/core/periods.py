"""Reading "24h", "7d", "2w" or an ISO date from the command line as a point in time."""

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
