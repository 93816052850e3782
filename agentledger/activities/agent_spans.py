"""A span for each model call and each tool call, and the run's `invoke_agent` span above
them, in the OpenTelemetry GenAI conventions.

Made in the activities, never in workflow code: an activity attempt runs once, so a worker
that replays a run's history (an evicted run, a restart) makes no span twice. Each model and
tool span is a child of the run's `invoke_agent` span (agentledger.activities.run_span),
linked to Temporal's `RunActivity:...` span, which the client's `TracingInterceptor` makes
current while the activity runs (agentledger.temporal.telemetry), so it sits in the run's
one trace. Off unless AGENTLEDGER_OTEL is set; prompts, answers, tool arguments and results are
recorded only with AGENTLEDGER_OTEL_CAPTURE_CONTENT, since they are the users' data.

The names are the GenAI semantic conventions', from `opentelemetry-semantic-conventions`
(with the older `gen_ai.system` beside `gen_ai.provider.name` for viewers that know only
it); what the conventions have no name for is under `agentledger.*`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentledger.activities.agent_metrics import count_tool_failure
from agentledger.core.results import Receipt
from agentledger.core.states import RunStatus
from agentledger.core.wire import ModelCallInput, ModelCallResult, ToolCallInput, ToolCallResult

if TYPE_CHECKING:  # the tool activity imports this module, and needs no model SDK
    from agentledger.activities.provider_clients import ModelEndpoint

try:  # the `otel` extra; without it there are no spans to make
    from opentelemetry import context, trace
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv.attributes import error_attributes, server_attributes
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from agentledger.activities import genai_metrics, run_span
except ImportError:  # pragma: no cover - exercised where the extra is absent
    trace = None  # type: ignore[assignment]

TRACER_NAME = "agentledger"

PROVIDER_NAME = "agentledger.provider"  # the worker's name for it (AGENTLEDGER_PROVIDERS)
COST = "agentledger.cost_usd"
OUTCOME = "agentledger.outcome"
RETRY_REASON = "agentledger.retry.reason"
RUN_ID = "agentledger.run_id"
STEP_ID = "agentledger.step_id"
ATTEMPT = "agentledger.attempt"
TENANT = "agentledger.tenant"
TURN = "agentledger.turn"


class AgentSpans:
    """Makes the spans (and the GenAI metrics) of one worker's activities."""

    def __init__(self, *, enabled: bool, capture_content: bool = False) -> None:
        self.enabled = enabled and trace is not None
        self.capture_content = capture_content

    @contextmanager
    def model_call(
        self, input: ModelCallInput, model: str, endpoint: ModelEndpoint
    ) -> Iterator[_ModelSpan]:
        """The span of one model-call attempt, `chat {model}`, and its duration and tokens."""
        if not self.enabled:
            yield _ModelSpan(None, False, {})
            return
        measured: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.CHAT.value,
            gen_ai.GEN_AI_PROVIDER_NAME: endpoint.system,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
            server_attributes.SERVER_ADDRESS: endpoint.host,
        }
        if endpoint.port is not None:
            measured[server_attributes.SERVER_PORT] = endpoint.port
        attributes: dict[str, Any] = {
            **measured,
            gen_ai.GEN_AI_SYSTEM: endpoint.system,
            PROVIDER_NAME: endpoint.name,
            gen_ai.GEN_AI_REQUEST_TEMPERATURE: input.temperature,
            **_step(input.run_id, input.step_id),
        }
        if input.max_tokens:
            attributes[gen_ai.GEN_AI_REQUEST_MAX_TOKENS] = input.max_tokens
        if self.capture_content:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(input.messages or input.new_messages)
        started = time.monotonic()
        try:
            with self._span(f"chat {model}", attributes, input.run_id) as span:
                yield _ModelSpan(span, self.capture_content, measured)
        except BaseException as err:
            measured[error_attributes.ERROR_TYPE] = failure_kind(err)
            raise
        finally:
            genai_metrics.record_duration(measured, time.monotonic() - started)

    @contextmanager
    def tool_call(self, input: ToolCallInput) -> Iterator[_ToolSpan]:
        """The span of one tool-call attempt: `execute_tool {tool}`."""
        try:
            if not self.enabled:
                yield _ToolSpan(None, False, input.tool)
                return
            attributes: dict[str, Any] = {
                gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value,
                gen_ai.GEN_AI_TOOL_NAME: input.tool,
                gen_ai.GEN_AI_TOOL_TYPE: "function",
                **_step(input.run_id, input.step_id),
            }
            if input.call_id:
                attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = input.call_id
            if self.capture_content:
                attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(input.arguments)
            with self._span(f"execute_tool {input.tool}", attributes, input.run_id) as span:
                yield _ToolSpan(span, self.capture_content, input.tool)
        except BaseException as err:
            kind = failure_kind(err)
            if kind != "cancelled":  # a cancel is the run's decision, not the tool's failure
                count_tool_failure(input.tool, kind)
            raise

    def run_ended(self, receipt: Receipt) -> None:
        """The run's `invoke_agent` span, from its start to its end, and one per session
        turn under it: made once, by the activity that stores the receipt."""
        if not self.enabled or not run_span.owns_span_ids():
            return
        tracer = trace.get_tracer(TRACER_NAME)
        ids = run_span.run_span_context(receipt.run_id)
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
            gen_ai.GEN_AI_AGENT_NAME: receipt.agent,
            gen_ai.GEN_AI_CONVERSATION_ID: receipt.run_id,
        }
        with run_span.chosen_ids(ids):
            span = tracer.start_span(
                f"invoke_agent {receipt.agent}",
                context=context.Context(),  # a root of its own in the run's trace
                kind=SpanKind.INTERNAL,
                links=run_span.current_link(),
                start_time=run_span.nanoseconds(receipt.started_at),
                attributes={
                    **attributes,
                    gen_ai.GEN_AI_USAGE_INPUT_TOKENS: receipt.tokens_in,
                    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: receipt.tokens_out,
                    COST: receipt.cost_usd,
                    OUTCOME: receipt.outcome.value,
                    RUN_ID: receipt.run_id,
                    TENANT: receipt.tenant,
                },
            )
        if receipt.outcome in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.BUDGET_EXHAUSTED):
            span.set_attribute(error_attributes.ERROR_TYPE, receipt.outcome.value)
            span.set_status(Status(StatusCode.ERROR, (receipt.error or "")[:500]))
        for turn in receipt.turns:
            with run_span.chosen_ids(run_span.run_span_context(receipt.run_id, turn.turn)):
                tracer.start_span(
                    f"invoke_agent {receipt.agent}",
                    context=trace.set_span_in_context(span),
                    kind=SpanKind.INTERNAL,
                    start_time=run_span.nanoseconds(turn.started_at),
                    attributes={**attributes, TURN: turn.turn, RUN_ID: receipt.run_id},
                ).end(run_span.nanoseconds(turn.answered_at or receipt.finished_at))
        span.end(run_span.nanoseconds(receipt.finished_at))

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any], run_id: str) -> Iterator[Any]:
        # Under the run's span when its ids can be chosen; else under Temporal's activity span.
        parent = run_span.under_run_span(run_id) if run_span.owns_span_ids() else None
        tracer = trace.get_tracer(TRACER_NAME)
        # Exceptions are recorded here, with their kind, not by the SDK's default handler.
        with tracer.start_as_current_span(
            name,
            context=parent,
            kind=SpanKind.CLIENT
            if attributes[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
            else SpanKind.INTERNAL,
            attributes=attributes,
            links=run_span.current_link() if parent is not None else None,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as err:
                kind = failure_kind(err)
                span.set_attribute(error_attributes.ERROR_TYPE, kind)
                span.set_attribute(OUTCOME, "cancelled" if kind == "cancelled" else "error")
                span.record_exception(err)
                span.set_status(Status(StatusCode.ERROR, str(err)[:500]))
                raise


class _ModelSpan:
    def __init__(self, span: Any, capture_content: bool, measured: dict[str, Any]) -> None:
        self.span = span
        self.capture_content = capture_content
        self.measured = measured

    def ended(self, result: ModelCallResult) -> None:
        if self.span is None:
            return
        reused = result.journal_attempt != result.attempt
        self.measured[gen_ai.GEN_AI_RESPONSE_MODEL] = result.model
        if not reused:  # a response an earlier attempt paid for is not bought again
            genai_metrics.record_token_usage(
                self.measured, result.usage.input_tokens, result.usage.output_tokens
            )
        self.span.set_attributes(
            {
                gen_ai.GEN_AI_RESPONSE_MODEL: result.model,
                gen_ai.GEN_AI_USAGE_INPUT_TOKENS: result.usage.input_tokens,
                gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: result.usage.output_tokens,
                COST: result.cost_usd,
                ATTEMPT: result.attempt,
                OUTCOME: "reused" if reused else "ok",
            }
        )
        if self.capture_content:
            self.span.set_attribute(
                gen_ai.GEN_AI_OUTPUT_MESSAGES, _json([result.assistant_message])
            )


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
            self.span.set_attribute(error_attributes.ERROR_TYPE, "refused")
        if self.capture_content:
            self.span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _json(result.output))


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
