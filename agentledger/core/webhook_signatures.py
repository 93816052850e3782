"""Signed webhooks, as Stripe and GitHub sign them: HMAC-SHA256 over the timestamp and the
raw body, with a replay window (pure: no I/O, no clock of its own).

A delivery carries `AgentLedger-Signature: t=<unix seconds>,v1=<hex digest>`, the digest
being HMAC-SHA256(secret, f"{t}." + body). A receiver recomputes it over the bytes it got
(never a re-serialised copy), compares in constant time, and refuses a timestamp outside its
window, so a captured delivery cannot be replayed later. Several `v1=` entries may be given
while a secret is being rotated; any one that matches is enough.

    header = sign(secret, body, now=time.time())
    verify(secret, body, header, now=time.time())  # raises BadSignature, saying why
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "AgentLedger-Signature"
# How old (or how far ahead) a signature's timestamp may be, by default, when verified.
TOLERANCE_SECONDS = 300
SCHEME = "v1"


class BadSignature(ValueError):
    """The delivery's signature does not hold: refuse the delivery."""


def digest(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, *, now: float) -> str:
    """The signature header's value for `body` sent at `now` (unix seconds)."""
    if not secret:
        raise ValueError("a webhook secret must not be empty")
    timestamp = int(now)
    return f"t={timestamp},{SCHEME}={digest(secret, timestamp, body)}"


def verify(
    secret: str, body: bytes, header: str, *, now: float, tolerance: int = TOLERANCE_SECONDS
) -> int:
    """The signed timestamp, if `header` signs `body` with `secret` within `tolerance`
    seconds of `now`; else BadSignature."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == SCHEME and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise BadSignature(f"the header is not `t=<seconds>,{SCHEME}=<hex>`")
    if abs(now - timestamp) > tolerance:
        raise BadSignature(f"the timestamp is more than {tolerance} s from now (a replay?)")
    expected = digest(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, each) for each in candidates):
        raise BadSignature("no signature matches this body and secret")
    return timestamp
