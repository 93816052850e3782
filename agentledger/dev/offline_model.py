"""An offline, deterministic model behind the OpenAI chat-completions HTTP API, on loopback.

Without an API key, the demo, the tests and production share one client code path: the
real `openai` SDK over real HTTP. The planner is a small rule set, not a language model: it
searches the notes, sends a message when the task asks for one, then answers.
Run alone with `python -m agentledger.dev.offline_model --port 8000`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentledger.core.background_http import BackgroundHTTPServer
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import OFFLINE_MODEL
from agentledger.core.log_setup import configure_logging

log = logging.getLogger(__name__)
Json = dict[str, Any]
# A streamed reply's text goes out in pieces this long (in at most STREAM_MAX_PIECES),
# `stream_pause_seconds` apart.
STREAM_PIECE_CHARS = 16
STREAM_MAX_PIECES = 40
MESSAGE_WORDS = ("send", "notify", "message", "email", "tell", "reply")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
ASKED_CALL = re.compile(r"\bcall ([A-Za-z0-9_-]+) (\{[^{}]*\})")
# How pydantic-evals' LLMJudge prompts begin: the offline model grades by the verifier's rule.
GRADER = "You are grading output according to a user-specified rubric"
# An instruction that swaps a call for another on some tasks:
# `when the task mentions "WORD", call TOOL {json} instead of OTHER`.
SWAP = re.compile(
    r'when the task mentions "([^"]+)", call ([A-Za-z0-9_-]+) (\{[^{}]*\}) instead of '
    r"([A-Za-z0-9_-]+)"
)


@dataclass
class Reply:
    """What the server answers: a status, a JSON body, headers, and an optional delay."""

    body: Json
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    drop_connection: bool = False
    streams: bool = True  # False: one JSON body even when asked to stream, as some providers
    page: str | None = None  # sent instead of `body` as text/html, as a proxy's error page is


Responder = Callable[[Json], Reply]


def count_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


def completion(
    request: Json, *, content: str | None = None, tool_calls: Sequence[tuple[str, Json]] = ()
) -> Reply:
    """Build an OpenAI-shaped chat completion; call ids are derived, so replies are stable."""
    seed = hashlib.sha256(json.dumps(request.get("messages", []), sort_keys=True).encode())
    calls = [
        {
            "id": f"call_{seed.hexdigest()[:12]}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(tool_calls)
    ]
    message: Json = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    prompt, answer = count_tokens(request.get("messages", [])), count_tokens(message)
    return Reply(
        {
            "id": f"chatcmpl-{seed.hexdigest()[:16]}",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", OFFLINE_MODEL),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": answer,
                "total_tokens": prompt + answer,
            },
        }
    )


def offline_planner(request: Json) -> Reply:
    messages: list[Json] = request.get("messages", [])
    if messages and str(messages[0].get("content", "")).startswith("You are a strict verifier"):
        return completion(request, content=_verdict(str(messages[-1].get("content", ""))))
    if messages and GRADER in str(messages[0].get("content", "")):
        return _graded(request, str(messages[-1].get("content", "")))
    return _swapped(request, _plan(request, messages))


def _swapped(request: Json, reply: Reply) -> Reply:
    """The planner's calls with the tools the instructions swap on this task: this is how a
    prompt change makes the offline model call a different tool (an eval's candidate)."""
    messages: list[Json] = request.get("messages", [])
    system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
    task = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
    swaps = {old: (new, raw) for word, new, raw, old in SWAP.findall(system) if word in task}
    message = reply.body.get("choices", [{}])[0].get("message", {})
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    if not any(name in swaps for name, _ in calls):
        return reply
    return completion(
        request,
        tool_calls=[
            (swaps[name][0], json.loads(swaps[name][1])) if name in swaps else (name, args)
            for name, args in calls
        ],
    )


def _plan(request: Json, messages: list[Json]) -> Reply:
    offered = {t["function"]["name"] for t in request.get("tools", []) if t.get("function")}
    task = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    called = [
        call["function"]["name"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    ]
    results = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    asked = [(name, args) for name, args in asked_calls(task) if name in offered]
    if asked:
        if len(called) < len(asked):
            name, arguments = asked[len(called)]
            # Its stated reason, as a model says why it calls a tool (an approver reads it).
            reason = f"The task asks me to call {name}; calling it now."
            return completion(request, content=reason, tool_calls=[(name, arguments)])
        return completion(request, content=_report(task, called, results))
    if "search_notes" in offered and "search_notes" not in called:
        return completion(request, tool_calls=[("search_notes", {"query": task})])
    wants_message = any(word in task.lower() for word in MESSAGE_WORDS)
    if "send_message" in offered and wants_message and "send_message" not in called:
        found = EMAIL.search(task)
        body = "Hello,\n\n" + "\n".join(_findings(results)) + "\n\nBest regards"
        return completion(
            request,
            tool_calls=[
                (
                    "send_message",
                    {
                        "to": found.group(0) if found else "customer@example.com",
                        "subject": f"About your request: {task[:60]}",
                        "body": body,
                    },
                )
            ],
        )
    return completion(request, content=_final_answer(task, results))


def asked_calls(task: str) -> list[tuple[str, Json]]:
    """The calls a task spells out as `call TOOL {json}`, in order: without a language model,
    this is how a task asks the offline planner for your own tools."""
    calls = []
    for name, raw in ASKED_CALL.findall(task):
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict):
            calls.append((name, arguments))
    return calls


def _report(task: str, called: list[str], results: list[str]) -> str:
    actions = "\n".join(f"- {name}: {raw}" for name, raw in zip(called, results, strict=False))
    return f"## Summary\nDone: {task}\n\n## Actions\n{actions or '- None.'}"


def _verdict(prompt: str) -> str:
    """A judge's verdict: the answer passes when it has every line the rubric quotes."""
    rubric, _, answer = prompt.partition("\n\nAnswer:\n")
    return json.dumps(_grade(rubric, answer))


def _graded(request: Json, prompt: str) -> Reply:
    """A pydantic-evals LLMJudge's grade, by the verifier's rule, as its `final_result` call
    (the structured output pydantic-ai asks for), or as JSON text when no tool is offered."""
    rubric, output = (_section(prompt, name) for name in ("Rubric", "Output"))
    grade = _grade(rubric, output)
    grade["score"] = 1.0 if grade["pass"] else 0.0
    if any(t.get("function", {}).get("name") == "final_result" for t in request.get("tools", [])):
        return completion(request, tool_calls=[("final_result", grade)])
    return completion(request, content=json.dumps(grade))


def _section(prompt: str, name: str) -> str:
    found = re.search(rf"<{name}>(.*?)</{name}>", prompt, re.S)
    return found.group(1) if found else ""


def _grade(rubric: str, answer: str) -> Json:
    wanted = re.findall(r'"([^"]+)"', rubric)
    missing = [w for w in wanted if w not in answer]
    reason = f"missing {missing}" if missing else "every quoted requirement is met"
    return {"pass": not missing, "reason": reason}


def _findings(results: list[str]) -> list[str]:
    lines = []
    for raw in results:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = raw
        if isinstance(data, dict) and "matches" in data:
            lines += [str(m) for m in data["matches"]]
    return lines or ["No notes were needed."]


def _final_answer(task: str, results: list[str]) -> str:
    actions = []
    for raw in results:
        if '"message_id"' in raw:
            actions.append(f"- Sent a message: {raw}")
        elif '"error"' in raw:
            actions.append(f"- A tool call did not run: {raw}")
    findings = "\n".join(f"- {line}" for line in _findings(results))
    return f"## Summary\nDone: {task}\n\n## Findings\n{findings}\n\n## Actions\n" + (
        "\n".join(actions) or "- No actions with side effects."
    )


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(
                Reply({"object": "list", "data": [{"id": OFFLINE_MODEL, "object": "model"}]})
            )
        else:
            self._send(Reply({"error": {"message": "not found"}}, status=404))

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(Reply({"error": {"message": f"no route {self.path}"}}, status=404))
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        except json.JSONDecodeError as err:
            self._send(Reply({"error": {"message": f"invalid JSON: {err}"}}, status=400))
            return
        self.server.requests.append(request)
        self.server.request_headers.append({k.lower(): v for k, v in self.headers.items()})
        reply = self.server.responder(request)
        if reply.delay_seconds:
            time.sleep(reply.delay_seconds)
        if reply.drop_connection:  # a reset mid-request, as a flaky proxy would do
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if (
            reply.streams
            and request.get("stream")
            and reply.status == 200
            and "choices" in reply.body
        ):
            self._send_stream(
                reply, bool((request.get("stream_options") or {}).get("include_usage"))
            )
            return
        self._send(reply)

    def _send_stream(self, reply: Reply, include_usage: bool) -> None:
        """The reply as server-sent events, the way providers stream: text in small pieces a
        moment apart, each tool call's id and name first and its arguments in two pieces,
        then the finish reason, then (if asked) the usage alone in the last chunk."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        body = reply.body
        choice = body["choices"][0]
        message = choice["message"]
        deltas: list[Json] = [{"role": "assistant"}]
        text = message.get("content") or ""
        size = max(STREAM_PIECE_CHARS, -(-len(text) // STREAM_MAX_PIECES))  # long: bigger
        deltas += [{"content": text[i : i + size]} for i in range(0, len(text), size)]
        for index, call in enumerate(message.get("tool_calls") or []):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            head = {"index": index, "id": call["id"], "type": "function"}
            deltas.append(
                {
                    "tool_calls": [
                        {**head, "function": {"name": call["function"]["name"], "arguments": ""}}
                    ]
                }
            )
            for part in (arguments[:half], arguments[half:]):
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        frame = {key: body[key] for key in ("id", "created", "model")}
        chunks = [
            {
                **frame,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": d, "finish_reason": None}],
            }
            for d in deltas
        ]
        chunks.append(
            {
                **frame,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
            }
        )
        if include_usage:
            chunks.append(
                {**frame, "object": "chat.completion.chunk", "choices": [], "usage": body["usage"]}
            )
        try:
            for i, chunk in enumerate(chunks):
                delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
                if i > 1 and "content" in delta:
                    time.sleep(self.server.stream_pause_seconds)
                # Timed as it is handed to the socket: a client on a busy machine may read it
                # before this thread runs again.
                sent = time.time()
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                if "content" in delta:
                    self.server.streamed.append((sent, delta["content"]))
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, reply: Reply) -> None:
        html = reply.page is not None
        payload = reply.page.encode() if reply.page is not None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "text/html" if html else "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout); nothing to tell it

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    responder: Responder
    requests: list[Json]
    request_headers: list[dict[str, str]]
    streamed: list[tuple[float, str]]
    stream_pause_seconds: float


class OfflineModelServer(BackgroundHTTPServer):
    """Serves a responder over HTTP in a background thread; `base_url` is for the SDK."""

    _server: _Server

    def __init__(
        self,
        responder: Responder = offline_planner,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_pause_seconds: float = 0.02,
    ) -> None:
        server = _Server((host, port), _Handler)
        server.responder = responder
        server.requests = []
        server.request_headers = []
        server.streamed = []
        server.stream_pause_seconds = stream_pause_seconds
        super().__init__(server)

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    @property
    def requests(self) -> list[Json]:
        """Every chat request received, in order: tests read what the model was sent."""
        return self._server.requests

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Each chat request's headers (names in lower case), in the order of `requests`."""
        return self._server.request_headers

    @property
    def streamed(self) -> list[tuple[float, str]]:
        """(epoch seconds, text) of each streamed piece of text, as it was handed to the
        socket: the bench times a token from here to the client that shows it."""
        return self._server.streamed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    settings = AgentLedgerConfig.load()
    configure_logging(settings.log_level, settings.log_format)
    server = OfflineModelServer(host=args.host, port=args.port)
    log.info("offline model serving %r at %s", OFFLINE_MODEL, server.base_url)
    server.serve_forever()


if __name__ == "__main__":
    main()
