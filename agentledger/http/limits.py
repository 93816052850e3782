"""Each credential's share of the door, a request rate (a token bucket refilled at `rate`
per second, holding two seconds' worth), and each client address's failed
authentications, so keys cannot be guessed at speed. Counted in this process: a fleet of
servers behind a balancer multiplies them. (Streams: agentledger.http.streams;
connections: agentledger.http.connections.)"""

from __future__ import annotations

import math
import time
from collections import deque

from agentledger.http.errors import HttpRefusal

BURST_SECONDS = 2.0


class RequestRate:
    def __init__(self, per_second: float) -> None:
        self.rate = per_second
        self.capacity = max(1.0, per_second * BURST_SECONDS)
        self._buckets: dict[str, tuple[float, float]] = {}  # credential: (tokens, at)

    def take(self, credential: str) -> None:
        """Spend one request of `credential`'s, or refuse with 429 and when to come back."""
        now = time.monotonic()
        tokens, at = self._buckets.get(credential, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - at) * self.rate)
        if tokens < 1:
            wait = math.ceil((1 - tokens) / self.rate)
            self._buckets[credential] = (tokens, now)
            raise HttpRefusal(
                429,
                "rate_limited",
                f"more than {self.rate:g} requests per second with this credential; "
                f"retry after {wait} s",
                {"Retry-After": str(wait)},
            )
        self._buckets[credential] = (tokens - 1, now)


class FailedAuth:
    """At most `limit` failed authentications per client address in a sliding `window` of
    seconds; past it the address is refused (429), whatever it sends, until the oldest
    failure leaves the window."""

    # Addresses remembered at once before the ones whose failures all left the window go.
    TRACKED = 10_000

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, deque[float]] = {}

    def check(self, address: str) -> None:
        """Refuse `address` with 429 if it failed too often lately."""
        failures = self._failures.get(address)
        if failures is None:
            return
        now = time.monotonic()
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if len(failures) >= self.limit:
            wait = max(1, math.ceil(failures[0] + self.window - now))
            raise HttpRefusal(
                429,
                "too_many_failures",
                f"{self.limit} failed authentications from this address in "
                f"{self.window:g} s; check the key, then retry after {wait} s",
                {"Retry-After": str(wait)},
            )

    def failed(self, address: str) -> None:
        now = time.monotonic()
        if len(self._failures) >= self.TRACKED:
            self._failures = {
                a: f for a, f in self._failures.items() if f and f[-1] > now - self.window
            }
        self._failures.setdefault(address, deque(maxlen=self.limit)).append(now)
