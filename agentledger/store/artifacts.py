"""Artifacts: large outputs stored outside Temporal's history, addressed by content hash.

A tool output over the threshold is stored here and replaced, in the workflow's payloads,
by a reference and a short preview; no run nears Temporal's payload or history limits.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from agentledger.core.spec import JsonDict
from agentledger.core.wire import ArtifactRef

PREVIEW_CHARS = 2000


class ArtifactStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def put(
        self, *, run_id: str, step_id: str | None, name: str, media_type: str, content: bytes
    ) -> ArtifactRef:
        async with self.pool.connection() as conn:
            return await put_artifact(
                conn,
                run_id=run_id,
                step_id=step_id,
                name=name,
                media_type=media_type,
                content=content,
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


async def put_artifact(
    conn: AsyncConnection[Any],
    *,
    run_id: str,
    step_id: str | None,
    name: str,
    media_type: str,
    content: bytes,
) -> ArtifactRef:
    """Store `content` on the caller's connection (a tool's, inside its transaction)."""
    artifact_id = "sha256:" + hashlib.sha256(content).hexdigest()
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


async def run_artifact(
    conn: AsyncConnection[Any], run_id: str, artifact_id: str
) -> tuple[str, bytes] | None:
    """(name, content) of an artifact the run stored or one of its steps names, else None.

    Artifacts are addressed by content, so a file a step wrote may have been stored first by
    another run; a step's recorded output naming it makes it this run's too.
    """
    cur = await conn.execute(
        """SELECT name, content FROM artifacts
           WHERE artifact_id = %(id)s
             AND (run_id = %(run)s OR EXISTS (
                  SELECT 1 FROM steps
                  WHERE run_id = %(run)s AND strpos(output::text, %(id)s) > 0))""",
        {"id": artifact_id, "run": run_id},
    )
    row = await cur.fetchone()
    return None if row is None else (str(row[0]), bytes(row[1]))


async def sandbox_executions(conn: AsyncConnection[Any], run_id: str) -> list[JsonDict]:
    """Each `run_code` step of the run, with the image digest it ran on (for its receipt)."""
    cur = await conn.execute(
        """SELECT step_id, attempt, output->>'image', output->>'image_digest',
                  output->>'status', (output->>'exit_code')::int
           FROM steps
           WHERE run_id = %s AND output ? 'image_digest'
           ORDER BY seq""",
        (run_id,),
    )
    return [
        {
            "step_id": step_id,
            "attempt": attempt,
            "image": image,
            "image_digest": digest,
            "status": status,
            "exit_code": exit_code,
        }
        for step_id, attempt, image, digest, status, exit_code in await cur.fetchall()
    ]


async def run_artifacts(conn: AsyncConnection[Any], run_id: str) -> list[JsonDict]:
    """The artifacts the run stored, oldest first: id, name, media type, size, step."""
    cur = await conn.execute(
        """SELECT artifact_id, name, media_type, size_bytes, step_id FROM artifacts
           WHERE run_id = %s ORDER BY created_at, artifact_id""",
        (run_id,),
    )
    return [
        {
            "artifact_id": artifact_id,
            "name": name,
            "media_type": media_type,
            "size_bytes": size,
            "step_id": step_id,
        }
        for artifact_id, name, media_type, size, step_id in await cur.fetchall()
    ]
