"""The conversation a run's model sees, kept in Postgres rather than in Temporal's history.

Passing the whole conversation to every model call would make history grow with the square
of the run's length. Instead each model call carries only the messages added since the last
one; the activity stores them (keyed by position, so a retry writes nothing new) and reads
the whole conversation back.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.constants import STEP_OUTPUT_REF
from agentledger.core.spec import JsonDict

# The new messages stored where no earlier attempt stored them, and the conversation up to
# their end read back, in one statement. Its read sees the table as it was before the
# statement, so the rows it inserts are added from its input: the result is the table after
# it, a row stored earlier (by an attempt that died) winning over its new copy.
EXTEND = """
    WITH given AS (
        SELECT %(first)s + m.ord - 1 AS idx, m.message
        FROM jsonb_array_elements(%(messages)s::jsonb) WITH ORDINALITY AS m(message, ord)
    ), stored AS (
        INSERT INTO conversation (run_id, idx, message)
        SELECT %(run)s, idx, message FROM given
        ON CONFLICT (run_id, idx) DO NOTHING
        RETURNING idx
    )
    SELECT idx, message FROM conversation WHERE run_id = %(run)s AND idx < %(end)s
    UNION ALL
    SELECT idx, message FROM given WHERE idx IN (SELECT idx FROM stored)
    ORDER BY idx
"""


class ConversationStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def extend(
        self, run_id: str, first_index: int, messages: list[JsonDict]
    ) -> list[JsonDict]:
        """Store messages from `first_index` on; return the conversation up to their end."""
        async with self.pool.connection() as conn:
            messages = await self._resolve(conn, run_id, messages)
            end = first_index + len(messages)
            cur = await conn.execute(
                EXTEND,
                {"run": run_id, "first": first_index, "end": end, "messages": Jsonb(messages)},
            )
            rows = await cur.fetchall()
        if [idx for idx, _ in rows] != list(range(end)):
            raise LookupError(f"the stored conversation of {run_id} has gaps")
        return [dict(message) for _, message in rows]

    async def _resolve(self, conn: Any, run_id: str, messages: list[JsonDict]) -> list[JsonDict]:
        """The messages, each reference to a step's output replaced by a tool message that
        holds it: the outputs read in one query, however many the messages name."""
        wanted = [m[STEP_OUTPUT_REF] for m in messages if m.get(STEP_OUTPUT_REF) is not None]
        if not wanted:
            return messages
        cur = await conn.execute(
            "SELECT step_id, output FROM steps WHERE run_id = %s AND step_id = ANY(%s)",
            (run_id, wanted),
        )
        outputs = {str(step_id): output for step_id, output in await cur.fetchall()}
        resolved = []
        for message in messages:
            step_id = message.get(STEP_OUTPUT_REF)
            if step_id is None:
                resolved.append(message)
                continue
            if step_id not in outputs:
                raise LookupError(f"step {step_id} of {run_id} has no recorded output")
            content = json.dumps(outputs[step_id], default=str)
            resolved.append(
                {"role": "tool", "tool_call_id": message["tool_call_id"], "content": content}
            )
        return resolved
