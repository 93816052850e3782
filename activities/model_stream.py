"""One chat completion read as a stream (`stream=True`), put back together as the
`ChatCompletion` the rest of `model.complete` knows, with the text handed on as it comes.

Providers send the reply in chunks: content deltas, tool calls whose id and name come first
and whose arguments arrive in pieces (keyed by the call's index), `finish_reason` near the
end, and usage only in the last chunk (with `stream_options.include_usage`).
"""

from __future__ import annotations

from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from activities.text_stream import TextSink


async def streamed_completion(
    client: openai.AsyncOpenAI, request: dict[str, Any], on_text: TextSink
) -> ChatCompletion:
    stream = await client.chat.completions.create(
        **request, stream=True, stream_options={"include_usage": True}
    )
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = "stop"
    last: ChatCompletionChunk | None = None
    usage: dict[str, Any] | None = None
    async for chunk in stream:
        last = chunk
        if chunk.usage is not None:
            # As sent: a provider may leave a count out (the SDK does not check chunks).
            prompt = chunk.usage.prompt_tokens or 0
            completion = chunk.usage.completion_tokens or 0
            total = chunk.usage.total_tokens or prompt + completion
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total,
            }
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
                on_text(delta.content)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(
                    call.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.id:
                    entry["id"] = call.id
                if call.function is not None:
                    entry["function"]["name"] += call.function.name or ""
                    entry["function"]["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return ChatCompletion.model_validate(
        {
            "id": last.id if last else "",
            "object": "chat.completion",
            "created": last.created if last else 0,
            "model": last.model if last else request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        }
    )
