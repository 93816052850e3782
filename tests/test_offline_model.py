"""The offline model through the real `openai` SDK over HTTP, and how its errors are classified."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import openai
import pytest

from agentledger.activities.model_errors import classify_model_error
from agentledger.core.constants import OFFLINE_MODEL
from agentledger.dev.offline_model import OfflineModelServer, Reply
from agentledger.dev.stack import free_port
from tests.support import NOTIFY_TASK


def tool(name: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {p: {"type": kind} for p, kind in properties.items()},
            },
        },
    }


TOOLS = [
    tool("search_notes", query="string"),
    tool("send_message", to="string", subject="string", body="string"),
]


def sdk(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)


async def test_planner_searches_then_sends_then_answers(model_server):
    model = sdk(model_server.base_url)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": NOTIFY_TASK},
    ]

    first = await model.chat.completions.create(model=OFFLINE_MODEL, messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [search] = choice.message.tool_calls or []
    assert search.function.name == "search_notes"
    assert json.loads(search.function.arguments) == {"query": NOTIFY_TASK}
    assert first.usage and first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0

    note = "Refunds are possible within 30 days of purchase."
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": search.id, "content": json.dumps({"matches": [note]})},
    ]
    second = await model.chat.completions.create(
        model=OFFLINE_MODEL, messages=messages, tools=TOOLS
    )
    [send] = second.choices[0].message.tool_calls or []
    assert send.function.name == "send_message"
    sent = json.loads(send.function.arguments)
    assert sent["to"] == "ana@example.com"
    assert note in sent["body"], "the message carries what the search found"
    assert send.id != search.id

    messages += [
        second.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": send.id, "content": json.dumps({"message_id": "m-1"})},
    ]
    third = await model.chat.completions.create(model=OFFLINE_MODEL, messages=messages, tools=TOOLS)
    final = third.choices[0]
    assert final.finish_reason == "stop" and not final.message.tool_calls
    answer = final.message.content or ""
    assert answer.startswith("## Summary")
    assert note in answer and "Sent a message" in answer


async def test_plain_task_without_tools_gets_a_final_answer(model_server):
    reply = await sdk(model_server.base_url).chat.completions.create(
        model=OFFLINE_MODEL,
        messages=[{"role": "user", "content": "Summarize our invoice policy."}],
    )
    message = reply.choices[0].message
    assert not message.tool_calls
    assert (message.content or "").startswith("## Summary")
    assert "- No actions with side effects." in (message.content or "")
    assert reply.model == OFFLINE_MODEL


async def test_replies_are_deterministic(model_server):
    model = sdk(model_server.base_url)
    request: dict[str, Any] = {
        "model": OFFLINE_MODEL,
        "messages": [{"role": "user", "content": NOTIFY_TASK}],
        "tools": TOOLS,
    }
    one = await model.chat.completions.create(**request)
    two = await model.chat.completions.create(**request)
    assert one.id == two.id
    assert one.choices[0].message.model_dump() == two.choices[0].message.model_dump()
    ids = [c.id for c in one.choices[0].message.tool_calls or []]
    assert ids and ids == [c.id for c in two.choices[0].message.tool_calls or []]

    other = await model.chat.completions.create(
        **{**request, "messages": [{"role": "user", "content": "Email bob@example.com."}]}
    )
    assert other.id != one.id
    assert [c.id for c in other.choices[0].message.tool_calls or []] != ids


# ---------------------------------------------------------------- errors, scripted


def scripted(request: dict[str, Any]) -> Reply:
    """The model name picks the reply: "status-429" answers 429, and so on; headers follow
    as a query ("status-409?x-should-retry=false&retry-after-ms=1500")."""
    name, _, query = request["model"].partition("?")
    status = int(name.removeprefix("status-"))
    headers = dict(urllib.parse.parse_qsl(query)) or ({"retry-after": "3"} if status == 429 else {})
    return Reply({"error": {"message": f"scripted {status}", "type": "x"}}, status, headers)


@pytest.fixture
def failing_server() -> Iterator[OfflineModelServer]:
    with OfflineModelServer(scripted) as server:
        yield server


async def fail_with(
    server: OfflineModelServer, status: int, headers: dict[str, str] | None = None
) -> openai.APIStatusError:
    model = f"status-{status}" + (f"?{urllib.parse.urlencode(headers)}" if headers else "")
    with pytest.raises(openai.APIStatusError) as caught:
        await sdk(server.base_url).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == status
    return caught.value


async def test_rate_limit_is_retried_after_the_delay_the_provider_asks(failing_server):
    err = await fail_with(failing_server, 429)
    assert isinstance(err, openai.RateLimitError)
    assert err.response.headers["retry-after"] == "3"
    assert len(failing_server.requests) == 1, "the SDK itself does not retry (max_retries=0)"

    classified = classify_model_error(err)
    assert classified.type == "RateLimited"
    assert classified.non_retryable is False
    assert classified.next_retry_delay == timedelta(seconds=3)


@pytest.mark.parametrize(
    ("status", "sdk_error", "error_type", "non_retryable"),
    [
        (401, openai.AuthenticationError, "PermissionDenied", True),
        (403, openai.PermissionDeniedError, "PermissionDenied", True),
        (400, openai.BadRequestError, "BadRequest", True),
        (500, openai.InternalServerError, "ProviderUnavailable", False),
        (503, openai.InternalServerError, "ProviderUnavailable", False),
    ],
)
async def test_status_errors_are_classified(
    failing_server, status, sdk_error, error_type, non_retryable
):
    err = await fail_with(failing_server, status)
    assert isinstance(err, sdk_error)
    classified = classify_model_error(err)
    assert classified.type == error_type
    assert classified.non_retryable is non_retryable
    assert classified.next_retry_delay is None


@pytest.mark.parametrize(
    ("status", "headers", "error_type", "non_retryable", "delay"),
    [
        # What the OpenAI SDK itself retries: 408, 409, 429 and 5xx.
        (408, {}, "ProviderUnavailable", False, None),
        (409, {}, "ProviderUnavailable", False, None),
        (502, {"retry-after": "2"}, "ProviderUnavailable", False, timedelta(seconds=2)),
        # retry-after-ms is preferred to retry-after, as the SDK prefers it.
        (429, {"retry-after-ms": "1500", "retry-after": "9"}, "RateLimited", False, 1.5),
        (503, {"retry-after": "0.25"}, "ProviderUnavailable", False, 0.25),
        (408, {"retry-after": "soon"}, "ProviderUnavailable", False, None),
        # x-should-retry decides over the status, both ways.
        (400, {"x-should-retry": "true"}, "ProviderUnavailable", False, None),
        (429, {"x-should-retry": "false", "retry-after": "3"}, "RateLimited", True, None),
        (500, {"x-should-retry": "false"}, "ProviderUnavailable", True, None),
        (409, {"x-should-retry": "false"}, "BadRequest", True, None),
        (404, {}, "BadRequest", True, None),
        (422, {}, "BadRequest", True, None),
    ],
)
async def test_what_the_sdk_treats_as_transient_is_retried_by_temporal(
    failing_server, status, headers, error_type, non_retryable, delay
):
    err = await fail_with(failing_server, status, headers)
    assert len(failing_server.requests) == 1, "the SDK itself does not retry (max_retries=0)"
    classified = classify_model_error(err)
    assert classified.type == error_type, classified.message
    assert classified.non_retryable is non_retryable
    expected = timedelta(seconds=delay) if isinstance(delay, float) else delay
    assert classified.next_retry_delay == expected
    if "x-should-retry" in headers:
        assert f"x-should-retry: {headers['x-should-retry']}" in classified.message


async def test_retry_after_as_an_http_date_is_the_time_left_until_it(failing_server):
    when = datetime.now(UTC) + timedelta(seconds=30)
    err = await fail_with(failing_server, 503, {"retry-after": format_datetime(when, usegmt=True)})
    delay = classify_model_error(err).next_retry_delay
    assert delay is not None and timedelta(seconds=25) < delay <= timedelta(seconds=30)


async def test_unreachable_provider_is_retryable():
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(openai.APIConnectionError) as caught:
        await sdk(closed).chat.completions.create(
            model=OFFLINE_MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    classified = classify_model_error(caught.value)
    assert classified.type == "ProviderUnavailable"
    assert classified.non_retryable is False
