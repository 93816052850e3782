"""Streamed responses as real providers send them: tool-call arguments split across chunks,
`finish_reason: tool_calls`, usage only in the last chunk; read by the real `openai` client.
Workers ask for a stream unless AGENTLEDGER_MODEL_STREAM=0."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from agentledger.activities.model_errors import classify_model_error
from agentledger.activities.model_stream import plain_completion, streamed_completion
from agentledger.core.background_http import BackgroundHTTPServer
from agentledger.core.errors import PROVIDER_UNAVAILABLE
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, scripted, wait_pending

SUMMARY = "## Summary\nSent it.\n\n## Actions\n- Sent a message to ana."
CALL = ("send_message", {"to": "ana@example.com", "subject": "Refunds", "body": "Within 5 days."})


async def test_the_stream_splits_arguments_and_puts_usage_last() -> None:
    """The wire format itself, read raw: what a provider sends and our reader must handle."""
    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "t"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with OfflineModelServer(scripted([CALL], SUMMARY)) as model:
        post = urllib.request.Request(
            f"{model.base_url}/chat/completions",
            data=json.dumps(request).encode(),
            headers={"content-type": "application/json"},
        )
        with await asyncio.to_thread(urllib.request.urlopen, post, timeout=10) as response:
            text = (await asyncio.to_thread(response.read)).decode()
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert len([p for p in pieces if p]) >= 2, "the arguments arrive in several chunks"
    assert "".join(pieces) == json.dumps(CALL[1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    assert all("usage" not in c for c in chunks[:-1])


async def test_reading_a_stream_gives_back_the_response() -> None:
    texts: list[str] = []
    answer = "## Summary\nThe refund is on its way, within five working days."
    with OfflineModelServer(scripted([CALL], answer)) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0)
        for turn, messages in enumerate([[], [{"role": "assistant", "content": "x"}]]):
            request = {"model": "m", "messages": [{"role": "user", "content": "t"}, *messages]}
            plain = await client.chat.completions.create(**request)
            streamed = await streamed_completion(client, request, texts.append)
            assert streamed.choices[0].message == plain.choices[0].message, turn
            assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason
            assert streamed.usage == plain.usage and streamed.usage is not None
        await client.close()
    assert "".join(texts) == answer and len(texts) > 1, "the text is seen piece by piece"


async def test_a_streamed_run_calls_its_tools_and_counts_its_tokens(client, settings, worker):
    spec = make_spec()
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


async def test_a_provider_that_ignores_stream_is_read_whole() -> None:
    """Some OpenAI-compatible servers answer `stream: true` with one JSON body: that is the
    reply, and its text still reaches watchers."""
    answer = "## Summary\nRead whole."

    def whole(request: dict) -> Reply:
        return replace(completion(request, content=answer), streams=False)

    texts: list[str] = []
    with OfflineModelServer(whole) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0)
        request = {"model": "m", "messages": [{"role": "user", "content": "t"}]}
        reply = await streamed_completion(client, request, texts.append)
        await client.close()
    assert reply.choices[0].message.content == answer and texts == [answer]
    assert reply.usage is not None and reply.usage.total_tokens > 0


async def test_a_page_instead_of_a_reply_is_a_provider_error_that_names_it() -> None:
    """A proxy's HTML page with status 200 is not an empty reply: it is retried as the
    provider being unavailable, and the error says what came."""
    page = "<html><body>502 upstream gone</body></html>"
    with OfflineModelServer(lambda request: Reply({}, page=page)) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0)
        request = {"model": "m", "messages": [{"role": "user", "content": "t"}]}
        with pytest.raises(openai.APIResponseValidationError) as caught:
            await streamed_completion(client, request, lambda text: None)
        with pytest.raises(openai.APIResponseValidationError, match="502 upstream gone"):
            await plain_completion(client, request)  # AGENTLEDGER_MODEL_STREAM=0: the same
        await client.close()
    failure = classify_model_error(caught.value)
    assert failure.type == PROVIDER_UNAVAILABLE and not failure.non_retryable
    assert "text/html" in failure.message and "502 upstream gone" in failure.message


class SpareStream(BaseHTTPRequestHandler):
    """A provider's stream as lean as they come: chunks without `id`, `created`, `model` or
    `index` on their choices, the usage without a total, then an error event mid-stream
    when the request's model is `overloaded`."""

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers["content-length"])))
        chunks: list[dict] = [
            {"choices": [{"delta": {"content": "Hel"}}]},
            {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]},
        ]
        if asked["model"] == "overloaded":
            chunks.append({"error": {"message": "the model is overloaded", "type": "server"}})
        chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


async def test_a_lean_stream_is_read_and_an_error_in_it_is_the_provider_s() -> None:
    """Chunks are read as the JSON they came as: what a provider leaves out reads as absent,
    not as a broken reply; an error the provider sends inside the stream is an `APIError`,
    classified and retried as the provider's."""
    server = BackgroundHTTPServer(ThreadingHTTPServer(("127.0.0.1", 0), SpareStream)).start()
    client = openai.AsyncOpenAI(base_url=f"{server.origin}/v1", api_key="x", max_retries=0)
    try:
        texts: list[str] = []
        request = {"model": "m", "messages": [{"role": "user", "content": "t"}]}
        reply = await streamed_completion(client, request, texts.append)
        assert texts == ["Hel", "lo"] and reply.choices[0].message.content == "Hello"
        assert reply.model == "m" and reply.choices[0].finish_reason == "stop"
        assert reply.usage is not None and reply.usage.total_tokens == 5
        with pytest.raises(openai.APIError, match="the model is overloaded") as caught:
            await streamed_completion(client, {**request, "model": "overloaded"}, texts.append)
    finally:
        await client.close()
        server.stop()
    assert not classify_model_error(caught.value).non_retryable


async def test_the_conversation_and_the_tools_are_sent_as_given() -> None:
    """They ride in the SDK's `extra_body` (it does not walk them), so the body the provider
    gets must be exactly the request's."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Looks it up.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "t"}]
    with OfflineModelServer(scripted([], SUMMARY)) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0)
        request = {"model": "m", "messages": messages, "tools": tools, "temperature": 0.0}
        await streamed_completion(client, request, lambda text: None)
        await plain_completion(client, request)
        await client.close()
    for sent in model.requests:
        assert sent["messages"] == messages and sent["tools"] == tools, sent
        assert sent["model"] == "m" and sent["temperature"] == 0.0
