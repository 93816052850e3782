"""The shop's own encryption of every payload Temporal stores (not agentledger's)."""

import base64
import os
from collections.abc import Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/shop-encrypted"


class ShopCodec(PayloadCodec):
    def __init__(self, key: bytes) -> None:
        self._cipher = AESGCM(key)

    @classmethod
    def from_environment(cls) -> "ShopCodec":
        return cls(base64.b64decode(os.environ["SHOP_ENCRYPTION_KEY"]))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        sealed = []
        for payload in payloads:
            nonce = os.urandom(12)
            data = nonce + self._cipher.encrypt(nonce, payload.SerializeToString(), None)
            sealed.append(Payload(metadata={"encoding": ENCODING}, data=data))
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        opened = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                opened.append(payload)
                continue
            plain = Payload()
            plain.ParseFromString(self._cipher.decrypt(payload.data[:12], payload.data[12:], None))
            opened.append(plain)
        return opened
