"""A span for each model call and each tool call, in the OpenTelemetry GenAI conventions.

Made in the activities, never in workflow code: an activity attempt runs once, so a worker
that replays a run's history (an evicted run, a restart) makes no span twice. Each one is a
child of Temporal's `RunActivity:...` span, which the client's `TracingInterceptor` makes
current while the activity runs (agentrun/temporal/telemetry.py), so it sits in the run's
one trace. Off unless AGENTRUN_OTEL is set; prompts, answers, tool arguments and results are
recorded only with AGENTRUN_OTEL_CAPTURE_CONTENT, since they are the users' data.

The names are the GenAI semantic conventions' (`gen_ai.*`, as of semconv 1.37, with the
older `gen_ai.system` beside `gen_ai.provider.name` for viewers that know only it); what the
conventions have no name for is under `agentrun.*`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentrun.activities.agent_metrics import count_tool_failure
from agentrun.core._wire import ModelCallInput, ModelCallResult, ToolCallInput, ToolCallResult

if TYPE_CHECKING:  # the tool activity imports this module, and needs no model SDK
    from agentrun.activities.provider_clients import ModelEndpoint

try:  # the `otel` extra; without it there are no spans to make
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - exercised where the extra is absent
    trace = None  # type: ignore[assignment]

TRACER_NAME = "agentrun"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
PROVIDER_NAME = "agentrun.provider"  # the worker's name for it (AGENTRUN_PROVIDERS)
COST = "agentrun.cost_usd"
OUTCOME = "agentrun.outcome"
RETRY_REASON = "agentrun.retry.reason"
RUN_ID = "agentrun.run_id"
STEP_ID = "agentrun.step_id"
ATTEMPT = "agentrun.attempt"


class AgentSpans:
    """Makes the spans of one worker's activities."""

    def __init__(self, *, enabled: bool, capture_content: bool = False) -> None:
        self.enabled = enabled and trace is not None
        self.capture_content = capture_content

    @contextmanager
    def model_call(
        self, input: ModelCallInput, model: str, endpoint: ModelEndpoint
    ) -> Iterator[_ModelSpan]:
        """The span of one model-call attempt: `chat {model}`."""
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: endpoint.system,
            SYSTEM: endpoint.system,
            PROVIDER_NAME: endpoint.name,
            SERVER_ADDRESS: endpoint.host,
            REQUEST_MODEL: model,
            REQUEST_TEMPERATURE: input.temperature,
            **_step(input.run_id, input.step_id),
        }
        if endpoint.port is not None:
            attributes[SERVER_PORT] = endpoint.port
        if input.max_tokens:
            attributes[REQUEST_MAX_TOKENS] = input.max_tokens
        if self.capture_content:
            attributes[INPUT_MESSAGES] = _json(input.messages or input.new_messages)
        with self._span(f"chat {model}", attributes) as span:
            yield _ModelSpan(span, self.capture_content)

    @contextmanager
    def tool_call(self, input: ToolCallInput) -> Iterator[_ToolSpan]:
        """The span of one tool-call attempt: `execute_tool {tool}`."""
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: input.tool,
            TOOL_TYPE: "function",
            **_step(input.run_id, input.step_id),
        }
        if input.call_id:
            attributes[TOOL_CALL_ID] = input.call_id
        if self.capture_content:
            attributes[TOOL_ARGUMENTS] = _json(input.arguments)
        try:
            with self._span(f"execute_tool {input.tool}", attributes) as span:
                yield _ToolSpan(span, self.capture_content, input.tool)
        except BaseException as err:
            kind = failure_kind(err)
            if kind != "cancelled":  # a cancel is the run's decision, not the tool's failure
                count_tool_failure(input.tool, kind)
            raise

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        if not self.enabled:
            yield None
            return
        tracer = trace.get_tracer(TRACER_NAME)
        # Exceptions are recorded here, with their kind, not by the SDK's default handler.
        with tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT if attributes[OPERATION] == "chat" else SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as err:
                kind = failure_kind(err)
                span.set_attribute(ERROR_TYPE, kind)
                span.set_attribute(OUTCOME, "cancelled" if kind == "cancelled" else "error")
                span.record_exception(err)
                span.set_status(Status(StatusCode.ERROR, str(err)[:500]))
                raise


class _ModelSpan:
    def __init__(self, span: Any, capture_content: bool) -> None:
        self.span = span
        self.capture_content = capture_content

    def ended(self, result: ModelCallResult) -> None:
        if self.span is None:
            return
        reused = result.journal_attempt != result.attempt
        self.span.set_attributes(
            {
                RESPONSE_MODEL: result.model,
                INPUT_TOKENS: result.usage.input_tokens,
                OUTPUT_TOKENS: result.usage.output_tokens,
                COST: result.cost_usd,
                ATTEMPT: result.attempt,
                # A response an earlier attempt paid for is reused, not bought again.
                OUTCOME: "reused" if reused else "ok",
            }
        )
        if self.capture_content:
            self.span.set_attribute(OUTPUT_MESSAGES, _json([result.assistant_message]))


class _ToolSpan:
    def __init__(self, span: Any, capture_content: bool, tool: str) -> None:
        self.span = span
        self.capture_content = capture_content
        self.tool = tool

    def ended(self, result: ToolCallResult) -> None:
        if not result.ok:
            count_tool_failure(self.tool, "refused")
        if self.span is None:
            return
        outcome = "ok" if result.ok else "refused"
        if result.duplicate_prevented:
            outcome = "duplicate_prevented"
        elif result.unknown_outcome:
            outcome = "unknown_outcome"
        self.span.set_attributes({OUTCOME: outcome, ATTEMPT: result.attempt})
        if not result.ok:
            self.span.set_attribute(ERROR_TYPE, "refused")
        if self.capture_content:
            self.span.set_attribute(TOOL_RESULT, _json(result.output))


def note_retry_reason(reason: str | None) -> None:
    """Say on the current span why this attempt is a retry (the attempt before it's end)."""
    if trace is None or not reason:
        return
    trace.get_current_span().set_attribute(RETRY_REASON, reason[:500])


def failure_kind(err: BaseException) -> str:
    """The kind of failure a span and a metric name: the classified type, else the class."""
    if isinstance(err, ApplicationError) and err.type:
        return err.type
    if type(err).__name__ in ("CancelledError", "CancelledErrorType"):
        return "cancelled"
    return type(err).__name__


def _step(run_id: str, step_id: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {RUN_ID: run_id, STEP_ID: step_id}
    if activity.in_activity():
        attributes[ATTEMPT] = activity.info().attempt
    return attributes


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)
