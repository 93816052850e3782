"""An approver's key as a client holds it: the identity it was registered with and the
private half, which signs a decision (agentledger.core.approval_signatures says what is
signed). Loading and creating keys is agentledger.client.approver_keys's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentledger.core import approval_signatures
from agentledger.core.spec import Signer
from agentledger.core.wire import ApproveInput, DecisionSignature, RejectInput


@dataclass(frozen=True)
class ApproverKey:
    """A private key and the identity it was registered with."""

    signer: Signer
    key: Ed25519PrivateKey

    def sign(
        self, run_id: str, approval_id: str, decision: ApproveInput | RejectInput
    ) -> DecisionSignature:
        return approval_signatures.sign(self.key, run_id, approval_id, decision, datetime.now(UTC))
