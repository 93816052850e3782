"""For a webhook receiver: check that a delivery from agentledger is genuine.

from agentledger.webhooks import SIGNATURE_HEADER, verify
verify(secret, raw_body, headers[SIGNATURE_HEADER], now=time.time())  # BadSignature if not
"""

from agentledger.core.webhook_signatures import SIGNATURE_HEADER, BadSignature, sign, verify

__all__ = ["SIGNATURE_HEADER", "BadSignature", "sign", "verify"]
