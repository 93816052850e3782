"""Streamed responses as real providers send them: tool-call arguments split across chunks,
`finish_reason: tool_calls`, usage only in the last chunk; read by the real `openai` client."""

from __future__ import annotations

import json

import openai

from activities.model_stream import collect_stream
from agentrun.dev.offline_model import OfflineModelServer, completion, stream_chunks
from agentrun.ops import operations as ops
from tests.support import make_spec, scripted, wait_pending
from workflows import AgentRunWorkflow

SUMMARY = "## Summary\nSent it.\n\n## Actions\n- Sent a message to ana."
CALL = ("send_message", {"to": "ana@example.com", "subject": "Refunds", "body": "Within 5 days."})


def test_the_stream_splits_arguments_and_puts_usage_last() -> None:
    body = completion({"messages": []}, tool_calls=[CALL]).body
    chunks = stream_chunks(body, include_usage=True)
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert len([p for p in pieces if p]) > 3, "the arguments arrive in several chunks"
    assert "".join(pieces) == json.dumps(CALL[1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == body["usage"]
    assert all("usage" not in c for c in chunks[:-1])


async def test_collecting_a_stream_gives_back_the_response() -> None:
    texts: list[str] = []

    async def publish(piece: str) -> None:
        texts.append(piece)

    answer = "## Summary\nThe refund is on its way."
    turns = scripted([CALL], answer)
    with OfflineModelServer(turns) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0)
        for turn, messages in enumerate([[], [{"role": "assistant", "content": "x"}]]):
            request = {"model": "m", "messages": [{"role": "user", "content": "t"}, *messages]}
            plain = await client.chat.completions.create(**request)
            streamed = await collect_stream(
                await client.chat.completions.create(
                    **request, stream=True, stream_options={"include_usage": True}
                ),
                on_text=publish,
            )
            assert streamed.choices[0].message == plain.choices[0].message, turn
            assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason
            assert streamed.usage == plain.usage and streamed.usage is not None
        await client.close()
    assert "".join(texts) == answer, "each piece of text is seen as it arrives"


async def test_a_streamed_run_calls_its_tools_and_counts_its_tokens(client, settings, worker):
    spec = make_spec(model={"stream": True})
    with OfflineModelServer(scripted([CALL], SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            assert pending.arguments == CALL[1]
            await ops.approve(client, started.run_id, by="li", role="approver")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            state = await ops.status(client, started.run_id)
    assert result.status.value == "completed"
    assert all(r.get("stream") is True for r in model.requests)
    assert state.tokens_in > 0 and state.tokens_out > 0, "usage came in the last chunk"
