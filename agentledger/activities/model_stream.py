"""One chat completion read as a stream (`stream=True`), put back together as the
`ChatCompletion` the rest of `model.complete` knows, with the text handed on as it comes.

Providers send the reply in chunks: content deltas, tool calls whose id and name come first
and whose arguments arrive in pieces (keyed by the call's index), `finish_reason` near the
end, and usage only in the last chunk (with `stream_options.include_usage`). A provider
that answers with one JSON body instead is read as that; anything else (an HTML page from
a proxy) is a provider error that names what came, and is retried like one.

The SDK reads the stream (its server-sent events, an error sent in one, the end) and hands
each chunk over as the JSON it came as: building the SDK's typed object for every chunk
(its lenient, pure-Python `construct`) cost about 150 microseconds a chunk, a twentieth of
a worker's CPU at 100 concurrent runs, for the few fields read here.
"""

from __future__ import annotations

from typing import Any

import openai
import pydantic
from openai.types.chat import ChatCompletion

from agentledger.activities.text_stream import TextSink

# The request's parts that are stored as the JSON the endpoint takes.
AS_STORED = ("messages", "tools")


def sent_as_stored(request: dict[str, Any]) -> dict[str, Any]:
    """The request with its conversation and its tools in `extra_body`, whose keys the SDK
    sends over the request's own: the same JSON body, without the SDK walking every message
    and every tool's schema against its typed parameters on each call (130 ms at 300
    messages of 4 KB, where encoding them takes 7 ms, measured by the bench's long run)."""
    stored = {key: request[key] for key in AS_STORED if key in request}
    rest = {key: value for key, value in request.items() if key not in stored}
    return {**rest, "messages": [], "extra_body": stored}


async def streamed_completion(
    client: openai.AsyncOpenAI, request: dict[str, Any], on_text: TextSink
) -> ChatCompletion:
    raw = await client.chat.completions.with_raw_response.create(
        **sent_as_stored(request), stream=True, stream_options={"include_usage": True}
    )
    kind = raw.headers.get("content-type", "")
    if "text/event-stream" not in kind:
        # Not a stream: a provider that ignores `stream`, or a page from something between.
        whole = await whole_reply(raw.http_response, kind)
        for choice in whole.choices:
            if choice.message.content:
                on_text(choice.message.content)
        return whole
    # `object`: each chunk as the JSON it came as (see the module's docstring).
    stream = raw.parse(to=openai.AsyncStream[object])
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = "stop"
    last: dict[str, Any] = {}
    usage: dict[str, Any] | None = None
    async for sent in stream:
        chunk = last = sent if isinstance(sent, dict) else {}
        counted = chunk.get("usage")
        if isinstance(counted, dict):
            # As sent: a provider may leave a count out (the SDK does not check chunks).
            prompt = counted.get("prompt_tokens") or 0
            completion = counted.get("completion_tokens") or 0
            total = counted.get("total_tokens") or prompt + completion
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total,
            }
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
                on_text(delta["content"])
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(
                    call["index"],
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    entry["id"] = call["id"]
                function = call.get("function")
                if function is not None:
                    entry["function"]["name"] += function.get("name") or ""
                    entry["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return ChatCompletion.model_validate(
        {
            "id": last.get("id", ""),
            "object": "chat.completion",
            "created": last.get("created", 0),
            "model": last.get("model", request["model"]),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        }
    )


async def plain_completion(client: openai.AsyncOpenAI, request: dict[str, Any]) -> ChatCompletion:
    """One chat completion, not streamed (AGENTLEDGER_MODEL_STREAM=0), checked the same way."""
    raw = await client.chat.completions.with_raw_response.create(**sent_as_stored(request))
    return await whole_reply(raw.http_response, raw.headers.get("content-type", ""))


async def whole_reply(response: Any, kind: str) -> ChatCompletion:
    """`response`: the SDK's HTTP response, its body not read yet."""
    body = await response.aread()
    try:
        return ChatCompletion.model_validate_json(body)
    except pydantic.ValidationError:
        seen = body[:200].decode("utf-8", "replace")
        raise openai.APIResponseValidationError(
            response=response,
            body=seen,
            message=f"the provider answered {response.status_code} with "
            f"{kind or 'no content-type'}, not a chat completion: {seen!r}",
        ) from None
