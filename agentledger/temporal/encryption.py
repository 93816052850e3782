"""Optional AES-GCM encryption of every payload Temporal stores: inputs, results, signals,
queries, heartbeats, memos and failures.

With AGENTLEDGER_ENCRYPTION_KEYS set, the Temporal server (and anyone who reads its database)
sees only ciphertext; a worker or client holding the keys sees the payloads as before, and
the Web UI does through `python -m agentledger.temporal.codec_server`. Each payload names the key
id it
was written with, so rotating means adding a key, making it active, and keeping the old one
for as long as history written under it is read.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import UnknownEncryptionKey

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
NONCE_BYTES = 12


class EncryptionCodec(PayloadCodec):
    """Encrypts with the active key; decrypts with whichever key a payload names."""

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        if active_key_id not in keys:
            raise ValueError(f"active encryption key id {active_key_id!r} is not among the keys")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._active_key_id = active_key_id

    @property
    def active_key_id(self) -> str:
        return self._active_key_id

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        # A fresh random nonce per payload: GCM must never reuse one under the same key.
        nonce = os.urandom(NONCE_BYTES)
        cipher = self._ciphers[self._active_key_id]
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: self._active_key_id.encode()},
            data=nonce + cipher.encrypt(nonce, payload.SerializeToString(), None),
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was turned on, or by another codec
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode()
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownEncryptionKey(
                f"payload was encrypted with key id {key_id!r}, which is not configured: add "
                "it to AGENTLEDGER_ENCRYPTION_KEYS (keep retired keys there to read old history)"
            )
        nonce, ciphertext = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plaintext = cipher.decrypt(nonce, ciphertext, None)
        except InvalidTag as err:
            raise UnknownEncryptionKey(
                f"payload does not decrypt with key id {key_id!r}: the configured key for "
                "that id differs from the one it was written with, or the payload was altered"
            ) from err
        decoded = Payload()
        decoded.ParseFromString(plaintext)
        return decoded


def codec_for(settings: AgentLedgerConfig) -> EncryptionCodec | None:
    """The codec AGENTLEDGER_ENCRYPTION_KEYS describes; None when encryption is off."""
    if not settings.encryption_keys:
        return None
    keys = settings.encryption_key_material()
    return EncryptionCodec(keys, settings.encryption_key_id or next(iter(keys)))


def data_converter(settings: AgentLedgerConfig) -> DataConverter:
    """The one converter every client and worker uses: pydantic, plus encryption when keys
    are set. Failures are encoded too, so error messages and stack traces (which can quote
    task text or tool output) are encrypted rather than stored as plain text. A codec of the
    user's own (AGENTLEDGER_CODEC, AGENTLEDGER_CODEC_ENDPOINT) takes the place of encryption."""
    from agentledger.temporal.user_codec import user_codec

    codec = user_codec(settings) or codec_for(settings)
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def speaks_pydantic(converter: DataConverter) -> bool:
    """Whether `converter` writes and reads agentledger's pydantic models: its JSON converter is
    pydantic's (temporalio.contrib.pydantic's, or one built on it, as the OpenAI Agents
    plugin's is)."""
    payloads = converter.payload_converter_class()  # the instance the SDK wraps
    return isinstance(payloads, CompositePayloadConverter) and any(
        isinstance(each, PydanticJSONPlainPayloadConverter) for each in payloads.converters.values()
    )
