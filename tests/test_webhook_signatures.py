"""Webhook signatures as a receiver checks them: the body as sent, the secret, the window."""

from __future__ import annotations

import pytest

from agentledger.core.webhook_signatures import BadSignature, sign, verify

SECRET = "whsec-test-0123456789"
BODY = b'{"statusUpdate":{"taskId":"run-a~x"}}'
NOW = 1_800_000_000.0


def test_a_signature_holds_for_its_body_secret_and_time() -> None:
    header = sign(SECRET, BODY, now=NOW)
    assert header.startswith(f"t={int(NOW)},v1=")
    assert verify(SECRET, BODY, header, now=NOW + 10) == int(NOW)


@pytest.mark.parametrize(
    ("secret", "body", "now", "why"),
    [
        ("another-secret-000000", BODY, NOW, "no signature matches"),
        (SECRET, BODY + b" ", NOW, "no signature matches"),
        (SECRET, BODY, NOW + 301, "replay"),
        (SECRET, BODY, NOW - 301, "replay"),
    ],
)
def test_a_changed_body_another_secret_or_an_old_timestamp_is_refused(
    secret: str, body: bytes, now: float, why: str
) -> None:
    header = sign(SECRET, BODY, now=NOW)
    with pytest.raises(BadSignature, match=why):
        verify(secret, body, header, now=now)


def test_a_rotated_secret_is_accepted_beside_the_old_one_and_junk_is_refused() -> None:
    old, new = sign("old-secret-0000000000", BODY, now=NOW), sign(SECRET, BODY, now=NOW)
    both = old + "," + new.split(",")[1]
    assert verify(SECRET, BODY, both, now=NOW) == int(NOW)
    for junk in ("", "v1=abc", "t=abc,v1=abc", f"t={int(NOW)}"):
        with pytest.raises(BadSignature):
            verify(SECRET, BODY, junk, now=NOW)
    with pytest.raises(ValueError):
        sign("", BODY, now=NOW)
