"""Signed approval decisions: what an approver signs, and the run's check of it.

Pure and deterministic (no I/O, no clock: the caller passes the time), so the workflow runs
`check` inside its sandbox and a replay reaches the same verdict. An approver signs, with
an Ed25519 key only they hold, the exact bytes `message` builds from the run id, the
approval id, the action hash, the decision, the edit or the replacement of the arguments
(or the reason of a rejection) and the time; a decision therefore cannot be moved to another
run, another approval or another action, nor changed, nor kept for later use past
`signature_max_age_seconds`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime, timedelta

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from agentledger.core.results import PendingApproval
from agentledger.core.spec import ApprovalPolicy, Signer
from agentledger.core.wire import ApproveInput, DecisionSignature, RejectInput

# How far ahead of the run's clock a signature's time may be (clocks differ a little).
CLOCK_SKEW = timedelta(seconds=60)


class SignatureRefused(Exception):
    """The decision's signature does not let it apply; the message says why, for a person."""


def key_id(public_key: bytes) -> str:
    """A short fingerprint of a raw Ed25519 public key, shown in receipts."""
    return "ed25519:" + hashlib.sha256(public_key).hexdigest()[:16]


def public_key_text(key: Ed25519PublicKey) -> str:
    return base64.b64encode(key.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def message(
    run_id: str, approval_id: str, decision: ApproveInput | RejectInput, signed_at: datetime
) -> bytes:
    """The exact bytes an approver signs for `decision` on `approval_id` of `run_id`."""
    body: dict[str, object] = {
        "run_id": run_id,
        "approval_id": approval_id,
        "action_hash": decision.action_hash,
        "decision": "approved" if isinstance(decision, ApproveInput) else "rejected",
        "edit": decision.edit if isinstance(decision, ApproveInput) else None,
        "reason": decision.reason if isinstance(decision, RejectInput) else None,
        "by": decision.by,
        "signed_at": signed_at.isoformat(),
    }
    if isinstance(decision, ApproveInput) and decision.replace is not None:
        # Signed only when sent, so signatures made before replacements existed still hold.
        body["replace"] = decision.replace
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(
    key: Ed25519PrivateKey,
    run_id: str,
    approval_id: str,
    decision: ApproveInput | RejectInput,
    signed_at: datetime,
) -> DecisionSignature:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return DecisionSignature(
        key_id=key_id(raw),
        approval_id=approval_id,
        signed_at=signed_at,
        signature=base64.b64encode(
            key.sign(message(run_id, approval_id, decision, signed_at))
        ).decode(),
    )


def check(
    policy: ApprovalPolicy,
    run_id: str,
    pending: PendingApproval,
    decided: list[str],
    decision: ApproveInput | RejectInput,
    now: datetime,
) -> Signer | None:
    """The signer whose valid signature lets `decision` apply, None when the policy takes
    unsigned decisions; SignatureRefused otherwise. `decided` are the approval ids this run
    has already decided, so a replayed decision is named as such."""
    signature = decision.signature
    if signature is None:
        if policy.signatures_required():
            raise SignatureRefused(
                f"this run takes only signed decisions: {decision.by} must sign with their "
                f"approver key: `{signed_command(run_id, decision)}` on the machine where "
                "`approvers add` made it"
            )
        return None
    signer = next((s for s in policy.signers if s.key_id == signature.key_id), None)
    if signer is None:
        raise SignatureRefused(f"key {signature.key_id} is not an approver key of this run")
    if signature.approval_id in decided:
        raise SignatureRefused(f"replayed: approval {signature.approval_id} was already decided")
    if signature.approval_id != pending.approval_id:
        raise SignatureRefused(
            f"signed for approval {signature.approval_id}, but the pending one is "
            f"{pending.approval_id}"
        )
    if not _valid(
        signer,
        message(run_id, signature.approval_id, decision, signature.signed_at),
        signature.signature,
    ):
        raise SignatureRefused(
            f"the signature does not match key {signer.key_id} for this run, approval and "
            "decision: forged, altered, or signed for another run"
        )
    if decision.by != signer.name:
        raise SignatureRefused(f"signed by {signer.name}'s key, but sent as {decision.by}")
    if now - signature.signed_at > timedelta(seconds=policy.signature_max_age_seconds):
        raise SignatureRefused(
            f"expired: signed at {signature.signed_at.isoformat()}, more than "
            f"{policy.signature_max_age_seconds:g}s ago; decide again"
        )
    if signature.signed_at - now > CLOCK_SKEW:
        raise SignatureRefused(f"signed at {signature.signed_at.isoformat()}, in the future")
    if signer.role != pending.required_role:
        raise SignatureRefused(
            f"{signer.name} is an approver of role {signer.role!r}, but {pending.tool} needs "
            f"role {pending.required_role!r}"
        )
    if signer.tenant is not None and signer.tenant != pending.tenant:
        raise SignatureRefused(
            f"{signer.name} approves for tenant {signer.tenant!r}, not {pending.tenant!r}"
        )
    return signer


def signed_command(run_id: str, decision: ApproveInput | RejectInput) -> str:
    """The command that makes `decision` again, signed by the key kept for its decider."""
    if isinstance(decision, RejectInput):
        return f'agentledger reject {run_id} --by {decision.by} --reason "..."'
    return f"agentledger approve {run_id} --by {decision.by}"


def _valid(signer: Signer, signed: bytes, signature: str) -> bool:
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(signer.public_key))
        key.verify(base64.b64decode(signature, validate=True), signed)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True
