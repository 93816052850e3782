"""A model call's text reaches subscribers over Postgres, and a retry replaces it: the worker
streaming a reply is SIGKILLed mid-stream, another takes the call over, and a subscriber
on the HTTP door (SSE) and one on the Python client (`watch`) each end with the retry's
text, every piece once, after a reset marker."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.results import WatchItem
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from tests import client_ops as ops
from tests.http_support import bearer, make_key, served, sse_events
from tests.support import make_spec
from tests.test_crash_recovery import start_worker_process

STEP = "0001-model_call"
# Long enough that the kill lands mid-stream: about 4 s of pieces, 16 characters each.
FIRST = "## Summary\n" + "".join(f"first attempt, piece {i:02d}. " for i in range(30))
RETRY = "## Summary\n" + "".join(f"the retry, piece {i:02d}. " for i in range(12))


def first_then_retry() -> tuple[list[str], Any]:
    """The model: the first call streams FIRST, every later one RETRY."""
    said: list[str] = []

    def answer(request: dict[str, Any]) -> Reply:
        said.append(FIRST if not said else RETRY)
        return completion(request, content=said[-1])

    return said, answer


def text_after_the_last_reset(items: list[WatchItem]) -> tuple[str, list[WatchItem]]:
    """The step's text as shown, and the items that came after its last reset."""
    resets = [n for n, i in enumerate(items) if i.kind == "text_reset" and i.step_id == STEP]
    after = items[resets[-1] + 1 :] if resets else items
    pieces = [i for i in after if i.kind == "text" and i.step_id == STEP]
    return "".join(p.text or "" for p in pieces), pieces


async def test_a_model_call_killed_mid_stream_ends_as_its_retrys_text_each_piece_once(
    client: Any, settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    key = await make_key(settings, tenant, "runner")
    said, answer = first_then_retry()
    with OfflineModelServer(answer, stream_pause_seconds=0.1) as model:
        local = settings.model_copy(update={"openai_base_url": model.base_url})
        doomed = await start_worker_process(local, "doomed")
        try:
            async with (
                served(local, tmp_path) as door,
                httpx.AsyncClient(base_url=door.url, timeout=120) as http,
            ):
                # Started as the door starts it, with a lease short enough for a test.
                spec = make_spec(
                    "Answer at once.",
                    tenant=tenant,
                    allowed_tools=[],
                    timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2},
                )
                started = await ops.start(
                    client, pool, spec, task_queue=settings.task_queue, acting_tenant=tenant
                )
                run_id = started.run_id
                first_pieces = asyncio.Event()
                over_sse: list[WatchItem] = []

                async def read_sse() -> None:
                    async with http.stream(
                        "GET", f"/v1/runs/{run_id}/events", headers=bearer(key)
                    ) as response:
                        async for event in sse_events(response):
                            item = WatchItem.model_validate(json.loads(event.data))
                            over_sse.append(item)
                            if sum(i.kind == "text" for i in over_sse) >= 3:
                                first_pieces.set()

                async def read_watch() -> list[WatchItem]:
                    return [i async for i in ops.watch(client, run_id, pool=pool)]

                sse = asyncio.create_task(read_sse())
                watched = asyncio.create_task(read_watch())
                await asyncio.wait_for(first_pieces.wait(), 60)
                doomed.send_signal(signal.SIGKILL)  # mid-stream: its lease runs out in 2 s
                assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
                async with worker(base_url=model.base_url):
                    await asyncio.wait_for(sse, 90)
                    by_watch = await asyncio.wait_for(watched, 90)
        finally:
            if doomed.returncode is None:
                doomed.kill()
                await doomed.wait()
    assert said == [FIRST, RETRY], "killed mid-reply, then retried once"
    for items in (over_sse, by_watch):
        shown = [i for i in items if i.step_id == STEP and i.kind in ("text", "text_reset")]
        [reset] = [i for i in shown if i.kind == "text_reset"]
        assert reset.data == {"attempt": 2, "replaces": 1}
        before = shown[: shown.index(reset)]
        cut = "".join(i.text or "" for i in before)
        assert cut and FIRST.startswith(cut) and cut != FIRST, "the first attempt's, cut off"
        text, pieces = text_after_the_last_reset(items)
        assert text == RETRY, "the retry's text, each piece once"
        assert all(p.data == {"attempt": 2} for p in pieces)
        assert items[-1].kind == "receipt" and items[-1].data["answer"] == RETRY
