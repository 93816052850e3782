"""A streamed chat completion, put back together as the one response it stands for.

Real providers stream the way the offline model's streaming mode does: content in pieces, each
tool call's id and name in its first chunk and its arguments split across later ones (keyed by
the call's index), `finish_reason` in the last choice chunk, and usage only in a final chunk
with no choices (when asked for with `stream_options.include_usage`). What comes back is the
`ChatCompletion` a non-streamed call would have returned, so the journal, secret sealing and
proposal checks after it do not know the difference.

`on_text` sees each piece of content as it arrives, before the response is whole: the place
to publish model text live (a `watch` stream). It must not fail the call: the response is
journaled only once it is whole, so what it published may be shown again on a retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk

TextSink = Callable[[str], Awaitable[None]]


async def collect_stream(
    chunks: AsyncIterable[ChatCompletionChunk], on_text: TextSink | None = None
) -> ChatCompletion:
    """Read the stream to its end and return the whole response."""
    head: ChatCompletionChunk | None = None
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = "stop"
    usage: Any = None
    async for chunk in chunks:
        head = head or chunk
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
                if on_text is not None:
                    await on_text(delta.content)
            for part in delta.tool_calls or []:
                call = calls.setdefault(
                    part.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.id or call["id"]
                if part.function is not None:
                    call["function"]["name"] += part.function.name or ""
                    call["function"]["arguments"] += part.function.arguments or ""
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    if head is None:
        raise ValueError("the model's stream ended before its first chunk")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return ChatCompletion.model_validate(
        {
            "id": head.id,
            "object": "chat.completion",
            "created": head.created,
            "model": head.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        }
    )
