"""Secret values kept out of history, the mirror, receipts and logs.

A tool marks a value secret (`ctx.secret(value)`, or `Tool(secret_results=...)`); from then
on only a marker such as `[secret:3f9a0c41d2b7e865]` stands for it: in the tool's result, the
model's conversation, the mirror, the ledger, the receipt and Temporal's history. The value
itself is sealed (AES-256-GCM) in `secret_values`, bound to its run. A tool that declares an
argument secret (`Tool(secret_args=...)`) receives the value behind a marker in that argument,
and only there: a marker pasted into any other argument (a message body, say) stays a marker,
so a model cannot leak a secret by quoting it.

The sealing key comes from AGENTLEDGER_ENCRYPTION_KEYS; without it each worker process makes
one of its own, and a secret opens only in the process that sealed it.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic_core import to_jsonable_python

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SecretUnavailable

MARKER = re.compile(r"\[secret:([0-9a-f]{16})\]")
NONCE_BYTES = 12


def marker(secret_id: str) -> str:
    return f"[secret:{secret_id}]"


class SecretScope:
    """The secret values one activity has seen, and the markers that stand for them."""

    def __init__(self) -> None:
        self._markers: dict[str, str] = {}  # value -> its marker
        self.unsealed: dict[str, str] = {}  # secret id -> value, not yet in the vault

    def __bool__(self) -> bool:
        return bool(self._markers)

    def mark(self, value: str) -> str:
        """The marker for `value`, a new one unless this scope already knows it."""
        if not isinstance(value, str) or not value:
            raise ValueError("a secret must be a non-empty string")
        known = self._markers.get(value)
        if known is not None:
            return known
        secret_id = secrets.token_hex(8)
        self._markers[value] = marker(secret_id)
        self.unsealed[secret_id] = value
        return self._markers[value]

    def known(self, secret_id: str, value: str) -> None:
        """A value opened from the vault keeps its marker wherever it shows up again."""
        self._markers.setdefault(value, marker(secret_id))

    def redact(self, value: Any) -> Any:
        """`value` with every secret this scope knows replaced by its marker, at any depth."""
        if not self._markers:
            return value
        # Longest first, so a secret that contains another is replaced whole.
        pairs = sorted(self._markers.items(), key=lambda kv: -len(kv[0]))
        return _replace(to_jsonable_python(value, fallback=str), pairs)


def _replace(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for secret, stand_in in pairs:
            if secret in value:
                value = value.replace(secret, stand_in)
        return value
    if isinstance(value, dict):
        return {_replace(k, pairs): _replace(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, pairs) for v in value]
    return value


def _derive(key: bytes) -> bytes:
    """A key of its own for the vault, so it never shares one with the payload codec. Its label
    keeps the project's first name: sealed rows open only with the label they were sealed with."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentrun vault").derive(key)


class SecretVault:
    """Sealed secret values in Postgres, by run; the markers in everything else open here."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        keys: Mapping[str, bytes] | None = None,
        active_key_id: str | None = None,
    ) -> None:
        if not keys:
            # No shared key: one for this process alone, named so others can say so.
            keys, active_key_id = {f"process-{secrets.token_hex(6)}": os.urandom(32)}, None
        self._ciphers = {key_id: AESGCM(_derive(key)) for key_id, key in keys.items()}
        self._active = active_key_id or next(iter(keys))
        self.pool = pool

    @classmethod
    def for_config(cls, pool: AsyncConnectionPool, config: AgentLedgerConfig) -> SecretVault:
        """The vault with the config's encryption keys (or a key of this process alone)."""
        return cls(pool, config.encryption_key_material(), config.encryption_key_id)

    @property
    def shared(self) -> bool:
        return not self._active.startswith("process-")

    async def seal(
        self, run_id: str, scope: SecretScope, conn: AsyncConnection[Any] | None = None
    ) -> None:
        """Store the scope's new secrets; call before any marker for them leaves the activity.

        A caller that holds a connection passes it, rather than wait for a second one."""
        if not scope.unsealed:
            return
        cipher = self._ciphers[self._active]
        rows = []
        for secret_id, value in scope.unsealed.items():
            nonce = os.urandom(NONCE_BYTES)
            sealed = nonce + cipher.encrypt(nonce, value.encode(), _aad(run_id, secret_id))
            rows.append((run_id, secret_id, self._active, sealed))
        if conn is None:
            async with self.pool.connection() as own:
                await _insert_sealed(own, rows)
        else:
            await _insert_sealed(conn, rows)
        scope.unsealed.clear()

    async def open(self, run_id: str, secret_ids: Iterable[str]) -> dict[str, str]:
        """The values behind these markers of this run; SecretUnavailable if one does not open."""
        wanted = sorted(set(secret_ids))
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT secret_id, key_id, sealed FROM secret_values
                   WHERE run_id = %s AND secret_id = ANY(%s)""",
                (run_id, wanted),
            )
            found = {row[0]: (row[1], bytes(row[2])) for row in await cur.fetchall()}
        values: dict[str, str] = {}
        for secret_id in wanted:
            if secret_id not in found:
                raise SecretUnavailable(f"{marker(secret_id)} is not a secret of this run")
            key_id, sealed = found[secret_id]
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise SecretUnavailable(
                    f"{marker(secret_id)} was sealed by another worker and cannot be opened "
                    "here (give every worker the same AGENTLEDGER_ENCRYPTION_KEYS so secrets "
                    "outlive the worker that received them); obtain the secret again"
                )
            nonce, ciphertext = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
            try:
                plain = cipher.decrypt(nonce, ciphertext, _aad(run_id, secret_id))
            except InvalidTag:
                raise SecretUnavailable(
                    f"{marker(secret_id)} does not decrypt with key id {key_id!r}: the key "
                    "configured under that id is not the one it was sealed with"
                ) from None
            values[secret_id] = plain.decode()
        return values


async def _insert_sealed(
    conn: AsyncConnection[Any], rows: list[tuple[str, str, str, bytes]]
) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO secret_values (run_id, secret_id, key_id, sealed)
               VALUES (%s, %s, %s, %s) ON CONFLICT (run_id, secret_id) DO NOTHING""",
            rows,
        )


def _aad(run_id: str, secret_id: str) -> bytes:
    """Binds a sealed value to its run and id: a row copied elsewhere does not open. The prefix
    keeps the project's first name, as `_derive`'s label does."""
    return f"agentrun-secret\x00{run_id}\x00{secret_id}".encode()
