"""Artifacts: large outputs stored outside Temporal's history, addressed by content hash.

A tool output over the threshold is stored here and replaced, in the workflow's payloads,
by a reference and a short preview; no run nears Temporal's payload or history limits.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psycopg_pool import AsyncConnectionPool

from agentrun.core.models import ArtifactRef

PREVIEW_CHARS = 2000


class ArtifactStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def put(
        self, *, run_id: str, step_id: str | None, name: str, media_type: str, content: bytes
    ) -> ArtifactRef:
        artifact_id = "sha256:" + hashlib.sha256(content).hexdigest()
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO artifacts (artifact_id, run_id, step_id, name, media_type,
                                          size_bytes, content)
                   VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (artifact_id) DO NOTHING""",
                (artifact_id, run_id, step_id, name, media_type, len(content), content),
            )
        preview = content[:PREVIEW_CHARS].decode("utf-8", errors="replace")
        return ArtifactRef(
            artifact_id=artifact_id,
            name=name,
            media_type=media_type,
            size_bytes=len(content),
            preview=preview,
        )

    async def get(self, artifact_id: str) -> bytes:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT content FROM artifacts WHERE artifact_id = %s", (artifact_id,)
            )
            row = await cur.fetchone()
        if row is None:
            raise LookupError(f"no artifact {artifact_id}")
        return bytes(row[0])

    async def offload(
        self, output: Any, *, run_id: str, step_id: str, name: str, threshold: int
    ) -> Any:
        """The output itself if it is small; otherwise a reference to it as an artifact."""
        body = json.dumps(output, default=str).encode()
        if len(body) <= threshold:
            return output
        ref = await self.put(
            run_id=run_id,
            step_id=step_id,
            name=name,
            media_type="application/json",
            content=body,
        )
        return {"artifact": ref.model_dump(), "note": "output stored as an artifact; preview shown"}
