"""A model call's text as it streams: written by `model.complete`, sent to subscribers at once.

Each attempt of a model call keeps its text in one row (`model_text`, keyed by run, step and
attempt). The activity appends each piece in one statement that also sends it on the run's
channel (`NOTIFY`, delivered when the statement commits), so a subscriber gets it within a
round trip of the provider sending it, without the run's workflow in the way. The row is
what a subscriber that joins late, misses a notice or comes back reads instead.

A piece is written at its character offset in the attempt's text, and a write replaces
everything from that offset on: a write sent again after a lost answer lands once. A retry
writes its attempt's row first, empty, so the row of a step's highest attempt is always the
text that attempt streamed, and a subscriber knows to drop what an earlier one sent.

Subscribers of one process share one connection that listens (`TextListener`): a door
serving many streams holds one Postgres connection for them, not one each. Behind a pooler
in transaction mode (PgBouncer) no session listens for long; subscribers then read the text
from the row when the step ends (agentledger.client.live_text).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)

# Postgres refuses a notice's payload of 8000 bytes or more; a longer piece is sent without
# its text, and subscribers read it from the row.
PAYLOAD_BYTES = 7500
# How long the listener waits for notices before it looks for channels to listen to or leave.
LISTEN_POLL_SECONDS = 0.05
# After its connection fails, the listener connects again this long after.
RECONNECT_SECONDS = 0.5
# A subscriber waits this long for its channel to be listened to before it reads rows only.
LISTEN_WAIT_SECONDS = 5.0

APPEND = """
WITH written AS (
    INSERT INTO model_text AS m (run_id, step_id, attempt, text)
    VALUES (%(run_id)s, %(step_id)s, %(attempt)s, %(text)s)
    ON CONFLICT (run_id, step_id, attempt) DO UPDATE
        SET text = left(m.text, %(offset)s) || EXCLUDED.text, updated_at = now()
        WHERE length(m.text) >= %(offset)s
    RETURNING 1
)
SELECT pg_notify(%(channel)s, %(notice)s) FROM written
"""

LATEST = """
SELECT DISTINCT ON (step_id) step_id, attempt, text FROM model_text
WHERE run_id = %s {and_step} ORDER BY step_id, attempt DESC
"""


def channel(run_id: str) -> str:
    """The run's channel: a name Postgres takes whatever the run id (at most 63 bytes)."""
    return "agentledger_text_" + hashlib.md5(run_id.encode()).hexdigest()


def storable(text: str) -> str:
    """`text` as Postgres stores it, character for character (no NUL in a text column)."""
    return text.replace("\x00", "\ufffd")


@dataclass(frozen=True)
class TextNotice:
    """A piece of an attempt's text at `offset`; `text` None: too long to send, read the row.
    `after_event`: the run's last event when the call was scheduled, which a subscriber
    shows first."""

    step_id: str
    attempt: int
    offset: int
    text: str | None
    after_event: int = 0


@dataclass(frozen=True)
class AttemptText:
    """What the row of a step's highest attempt holds now."""

    step_id: str
    attempt: int
    text: str


def notice_payload(notice: TextNotice) -> str:
    payload = {
        "s": notice.step_id,
        "a": notice.attempt,
        "o": notice.offset,
        "e": notice.after_event,
        "t": notice.text,
    }
    said = json.dumps(payload, separators=(",", ":"))
    if len(said.encode()) <= PAYLOAD_BYTES:
        return said
    return json.dumps({**payload, "t": None}, separators=(",", ":"))


def parse_notice(payload: str) -> TextNotice | None:
    try:
        said = json.loads(payload)
        return TextNotice(
            str(said["s"]), int(said["a"]), int(said["o"]), said.get("t"), int(said.get("e", 0))
        )
    except (ValueError, KeyError, TypeError):
        return None


class ModelTextStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def append(self, run_id: str, piece: TextNotice) -> None:
        """Write the piece at its offset of the attempt's text (replacing what is there from
        that offset on) and send it to the run's subscribers, in one statement."""
        text = storable(piece.text or "")
        step_id, attempt, offset = piece.step_id, piece.attempt, piece.offset
        notice = notice_payload(TextNotice(step_id, attempt, offset, text, piece.after_event))
        async with self.pool.connection() as conn:
            await conn.execute(
                APPEND,
                {
                    "run_id": run_id,
                    "step_id": step_id,
                    "attempt": attempt,
                    "offset": offset,
                    "text": text,
                    "channel": channel(run_id),
                    "notice": notice,
                },
            )

    async def latest(self, run_id: str, step_id: str | None = None) -> dict[str, AttemptText]:
        """The text of each step's highest attempt (of `step_id` alone, if given)."""
        query = LATEST.format(and_step="AND step_id = %s" if step_id is not None else "")
        params: tuple[Any, ...] = (run_id, step_id) if step_id is not None else (run_id,)
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)  # type: ignore[arg-type]
            rows = await cur.fetchall()
        return {row[0]: AttemptText(row[0], int(row[1]), row[2]) for row in rows}


class TextListener:
    """One connection listening on the channels of every run this process's subscribers
    follow. It connects with the first subscriber, listens to a channel while someone
    follows it, and closes when the last one leaves."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._queues: dict[str, set[asyncio.Queue[TextNotice]]] = {}
        self._listening: set[str] = set()
        self._listened = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def subscribe(self, run_id: str) -> AsyncIterator[asyncio.Queue[TextNotice]]:
        """A queue of the run's notices from the moment it is returned, once its channel is
        listened to (or `LISTEN_WAIT_SECONDS` have passed: a notice missed is read from the
        row later, agentledger.client.live_text)."""
        name = channel(run_id)
        queue: asyncio.Queue[TextNotice] = asyncio.Queue()
        self._queues.setdefault(name, set()).add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen())
        try:
            async with self._listened:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._listened.wait_for(lambda: name in self._listening),
                        LISTEN_WAIT_SECONDS,
                    )
            yield queue
        finally:
            queues = self._queues.get(name, set())
            queues.discard(queue)
            if not queues:
                self._queues.pop(name, None)

    async def _listen(self) -> None:
        while self._queues:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True
                ) as conn:
                    await self._serve(conn)
            except (psycopg.Error, OSError) as err:
                log.warning("listening for model text failed, connecting again: %s", err)
            await self._heard(set())
            if self._queues:
                await asyncio.sleep(RECONNECT_SECONDS)

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        listening: set[str] = set()
        while self._queues:
            wanted = set(self._queues)
            for name in wanted - listening:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            for name in listening - wanted:
                await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(name)))
            listening = wanted
            await self._heard(listening)
            async for notify in conn.notifies(timeout=LISTEN_POLL_SECONDS):
                notice = parse_notice(notify.payload)
                if notice is None:
                    continue
                for queue in self._queues.get(notify.channel, ()):
                    queue.put_nowait(notice)

    async def _heard(self, listening: set[str]) -> None:
        async with self._listened:
            self._listening = set(listening)
            self._listened.notify_all()


_LISTENERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TextListener]] = (
    weakref.WeakKeyDictionary()
)


def listener_for(pool: AsyncConnectionPool) -> TextListener:
    """The listener this process's subscribers on `pool`'s database share (one per event
    loop)."""
    listeners = _LISTENERS.setdefault(asyncio.get_running_loop(), {})
    conninfo = str(pool.conninfo)
    if conninfo not in listeners:
        listeners[conninfo] = TextListener(conninfo)
    return listeners[conninfo]
