"""A model attempt costs two round trips: its claim reads the journaled answer, and its
report journals a new one; the journal keeps every paid answer whatever the fence says."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
from temporalio.testing import ActivityEnvironment

from agentledger.activities.model import ModelActivities
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import STEP_OUTPUT_REF
from agentledger.core.results import Usage
from agentledger.core.wire import ModelCallInput
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.conversation import ConversationStore
from agentledger.store.mirror_store import AttemptEnd, MirrorStore
from agentledger.store.model_journal import Answer, ModelJournal
from agentledger.store.vault import SecretVault
from agentledger.tools import ToolRegistry
from tests.support import mirror_batch, rows, scripted, step_claim

STEP = "0002-model_call"


def claim(run_id: str, attempt: int, model: str = "m") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step_id": STEP,
        "seq": 2,
        "model": model,
        "attempt": attempt,
        "worker": "w",
        "lease_seconds": 5,
        "input": {"model": model, "messages": 3},
    }


def answer(text: str) -> Answer:
    return Answer("m", {"text": text}, Usage(input_tokens=10, output_tokens=5), 0.25)


def report(run_id: str, attempt: int, text: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step_id": STEP,
        "attempt": attempt,
        "status": "succeeded",
        "output": {"content": text, "tool_calls": []},
        "tokens_in": 10,
        "tokens_out": 5,
        "cost_usd": 0.25,
        "answer": answer(text),
    }


async def journal_rows(pool: Any, run_id: str) -> list[dict[str, Any]]:
    return await rows(
        pool,
        "SELECT attempt, model, response, tokens_in, tokens_out, cost_usd::float AS cost"
        " FROM model_journal WHERE run_id = %s ORDER BY attempt",
        run_id,
    )


async def test_the_claim_reads_the_journaled_answer_and_the_report_writes_it(pool):
    store = MirrorStore(pool)
    run_id = f"run-model-{uuid.uuid4().hex[:8]}"
    before = store.group_commit.stats.items
    # Attempt 1: nothing journaled yet; its claim carries the run's batch.
    first = await store.begin_model_attempt(**claim(run_id, 1), batch=mirror_batch(run_id, fence=4))
    assert first is None
    assert store.group_commit.stats.items == before + 1
    assert await rows(pool, "SELECT status FROM runs WHERE run_id = %s", run_id) == [
        {"status": "planning"}
    ]
    assert await store.end_attempt(**report(run_id, 1, "hello"))
    assert await journal_rows(pool, run_id) == [
        {
            "attempt": 1,
            "model": "m",
            "response": {"text": "hello"},
            "tokens_in": 10,
            "tokens_out": 5,
            "cost": 0.25,
        }
    ]
    step = await rows(
        pool,
        "SELECT status, output, tokens_in FROM steps WHERE run_id = %s AND step_id = %s",
        run_id,
        STEP,
    )
    assert step == [
        {
            "status": "attempt_succeeded",
            "output": {"content": "hello", "tool_calls": []},
            "tokens_in": 10,
        }
    ]
    # Attempt 2 (its worker lost attempt 1's completion) finds the paid answer in its claim,
    # and the journal agrees with what `ModelJournal.find` reads.
    found = await store.begin_model_attempt(**claim(run_id, 2))
    assert found == (1, {"text": "hello"})
    assert found == await ModelJournal(pool).find(run_id, STEP, "m")
    # Another model's answer is not this one's.
    assert await store.begin_model_attempt(**claim(run_id, 3, model="other")) is None


async def test_a_fenced_off_report_still_journals_its_paid_answer(pool):
    store = MirrorStore(pool)
    run_id = f"run-model-{uuid.uuid4().hex[:8]}"
    await store.begin_model_attempt(**claim(run_id, 1))
    await store.begin_model_attempt(**claim(run_id, 2))  # a newer attempt took the step over
    assert not await store.end_attempt(**report(run_id, 1, "late"))
    assert [r["attempt"] for r in await journal_rows(pool, run_id)] == [1]
    owner = await rows(pool, "SELECT attempt, status FROM steps WHERE run_id = %s", run_id)
    assert owner == [{"attempt": 2, "status": "running"}]
    # Written again (a retried report), the journal keeps one row.
    await store.end_attempt(**report(run_id, 1, "late"))
    assert len(await journal_rows(pool, run_id)) == 1


class CountingJournal(ModelJournal):
    """The real journal, counting the reads and writes made apart from the mirror's."""

    apart = 0

    async def find(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]] | None:
        self.apart += 1
        return await super().find(*args, **kwargs)

    async def keep(self, *args: Any, **kwargs: Any) -> None:
        self.apart += 1
        await super().keep(*args, **kwargs)


async def test_a_model_attempt_reads_and_journals_its_answer_with_its_claim_and_report(pool):
    """Attempt 1 pays for the answer and journals it with its report; attempt 2 (its worker
    lost attempt 1's completion) finds it with its claim and does not ask again."""
    run_id = f"run-model-{uuid.uuid4().hex[:8]}"
    journal = CountingJournal(pool)
    call = ModelCallInput(
        run_id=run_id,
        step_id=STEP,
        seq=2,
        model="m",
        messages=[{"role": "user", "content": "hello"}],
        allowed_tools=None,
        heartbeat_seconds=5,
        mirror=mirror_batch(run_id, fence=4),
    )
    with OfflineModelServer(scripted("## Summary\nhello")) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        activities = ModelActivities(
            client,
            ToolRegistry([]),
            MirrorStore(pool),
            journal,
            ConversationStore(pool),
            default_model="m",
            prices=AgentLedgerConfig.load({}).model_prices,
            identity="w",
            vault=SecretVault(pool),
            stream_text=False,
        )
        first = await ActivityEnvironment().run(activities.complete, call)
        retry = ActivityEnvironment()
        retry.info = dataclasses.replace(retry.info, attempt=2)
        second = await retry.run(activities.complete, call)
        asked = len(server.requests)
        await client.close()
    assert asked == 1, "the retry reused the paid answer"
    assert journal.apart == 0
    assert (first.content, first.journal_attempt) == ("## Summary\nhello", 1)
    assert (second.content, second.journal_attempt) == ("## Summary\nhello", 1)
    assert [r["attempt"] for r in await journal_rows(pool, run_id)] == [1]
    attempts = await rows(
        pool,
        "SELECT attempt, status, tokens_in > 0 AS paid FROM step_attempts WHERE run_id = %s"
        " ORDER BY attempt",
        run_id,
    )
    assert attempts == [
        {"attempt": 1, "status": "succeeded", "paid": True},
        {"attempt": 2, "status": "succeeded", "paid": False},
    ]


async def test_the_conversation_resolves_every_step_output_it_names(pool):
    """New messages may name tool steps' outputs (STEP_OUTPUT_REF); they are read together
    and stored as tool messages; a name with no recorded output stores nothing."""
    store, conversation = MirrorStore(pool), ConversationStore(pool)
    run_id = f"run-conv-{uuid.uuid4().hex[:8]}"
    for step, output in (("0003-tool_call", {"found": 3}), ("0004-tool_call", "plain")):
        await store.begin_attempt(
            **step_claim(run_id, step, 1),
            end=AttemptEnd("succeeded", output=output),
            started_at=datetime.now(UTC),
        )
    new = [
        {"role": "assistant", "content": None, "tool_calls": []},
        {STEP_OUTPUT_REF: "0003-tool_call", "tool_call_id": "a"},
        {STEP_OUTPUT_REF: "0004-tool_call", "tool_call_id": "b"},
    ]
    with pytest.raises(LookupError, match="0009-tool_call"):
        await conversation.extend(
            run_id, 1, [*new, {STEP_OUTPUT_REF: "0009-tool_call", "tool_call_id": "c"}]
        )
    assert await rows(pool, "SELECT idx FROM conversation WHERE run_id = %s", run_id) == []
    await conversation.extend(run_id, 0, [{"role": "user", "content": "find it"}])
    whole = await conversation.extend(run_id, 1, new)
    assert whole == [
        {"role": "user", "content": "find it"},
        new[0],
        {"role": "tool", "tool_call_id": "a", "content": '{"found": 3}'},
        {"role": "tool", "tool_call_id": "b", "content": '"plain"'},
    ]


async def test_a_retried_call_stores_only_its_new_messages_and_reads_the_stored_ones(pool):
    """The conversation is one statement: a retry's messages where an attempt that died stored
    them already change nothing (the stored ones are read back), the rest are added; a
    conversation with a hole says so."""
    conversation = ConversationStore(pool)
    run_id = f"run-conv-{uuid.uuid4().hex[:8]}"
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert await conversation.extend(run_id, 0, first) == first
    again = [{"role": "system", "content": "other"}, {"role": "user", "content": "hi"}]
    more = {"role": "assistant", "content": "hello"}
    assert await conversation.extend(run_id, 0, [*again, more]) == [*first, more]
    stored = await rows(
        pool, "SELECT idx, message FROM conversation WHERE run_id = %s ORDER BY idx", run_id
    )
    assert stored == [{"idx": i, "message": m} for i, m in enumerate([*first, more])]
    with pytest.raises(LookupError, match="gaps"):
        await conversation.extend(run_id, 5, [{"role": "user", "content": "later"}])
