"""Fail fast, with a reason, on a payload Temporal would refuse.

Temporal refuses any payload over its blob size limit (2 MB by default). Left alone, an
activity whose result is too large loses every attempt to the refused completion and retries
for as long as its policy allows, and a workflow that schedules an oversized input fails its
workflow task, which Temporal retries for ever: the run looks stuck. The worker interceptor
here measures each payload first, with the same converter that will send it, and turns an
oversized one into a non-retryable `PayloadTooLarge` ApplicationError that says how big it
is, the limit, where it came from and what to do. The run then fails (or, for a tool, the
model hears why) on the attempt that produced it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from agentledger.core.constants import ACTIVITY_MODEL_COMPLETE, ACTIVITY_TOOL_INVOKE
from agentledger.core.errors import PAYLOAD_TOO_LARGE

# A little under the server's default 2 MiB error limit: the encryption codec and the
# request's own framing add bytes after the payload is measured.
DEFAULT_LIMIT_BYTES = 1_900_000
# Strings longer than this are cut in a run's last record when the whole one would be refused.
TRIMMED_CHARS = 2000

HINTS = {
    ACTIVITY_MODEL_COMPLETE: "the model's reply is too large to pass through Temporal: lower "
    "the run spec's model.max_tokens, or ask for a shorter answer and put long content in a "
    "tool's output (large tool outputs become artifacts)",
    ACTIVITY_TOOL_INVOKE: "large tool outputs go to artifacts: keep "
    "AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES well under the limit, and keep checkpoints "
    "(ctx.save_checkpoint) and error messages small: store big data and pass a reference",
}
DEFAULT_HINT = "store large data outside Temporal (as an artifact) and pass a reference"

# Told which activity input and error message produced a refused result (the mirror records
# it as the attempt's failure).
RefusalHook = Callable[[Any, str], Awaitable[None]]
M = TypeVar("M", bound=BaseModel)


def is_too_large(err: BaseException) -> bool:
    return isinstance(err, ApplicationError) and err.type == PAYLOAD_TOO_LARGE


def refusal(size: int, limit: int, what: str, hint: str) -> ApplicationError:
    return ApplicationError(
        f"{what} is {size:,} bytes encoded, over the {limit:,}-byte payload limit "
        f"(AGENTLEDGER_PAYLOAD_LIMIT_BYTES; Temporal refuses payloads over its blob size limit, "
        f"2 MB by default): {hint}",
        type=PAYLOAD_TOO_LARGE,
        non_retryable=True,
    )


def trimmed(model: M, max_chars: int = TRIMMED_CHARS) -> M:
    """A copy of `model` with every string over `max_chars` cut and marked with its length:
    the last resort for a run's final record when the whole one would be refused."""
    return type(model).model_validate(_trim(model.model_dump(mode="json"), max_chars))


def _trim(value: Any, max_chars: int) -> Any:
    if isinstance(value, str) and len(value) > max_chars:
        return value[:max_chars] + f" [... cut: {len(value):,} characters in all]"
    if isinstance(value, dict):
        return {key: _trim(item, max_chars) for key, item in value.items()}
    if isinstance(value, list):
        return [_trim(item, max_chars) for item in value]
    return value


class PayloadLimitInterceptor(Interceptor):
    """Checks activity results (with the worker's data converter, codec included) and every
    input a workflow sends (activities, local activities, child workflows, signals,
    continue-as-new) and its result, against `limit` bytes."""

    def __init__(
        self,
        converter: DataConverter,
        limit: int = DEFAULT_LIMIT_BYTES,
        *,
        on_refused: RefusalHook | None = None,
    ) -> None:
        self.converter = converter
        self.limit = limit
        self.on_refused = on_refused

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityGuard(next, self)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        # The class is built per worker so that the sandboxed workflow knows the limit.
        return type("PayloadLimitWorkflowGuard", (_WorkflowGuard,), {"limit": self.limit})


class _ActivityGuard(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: PayloadLimitInterceptor) -> None:
        super().__init__(next)
        self.owner = owner

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await self.next.execute_activity(input)
        limit = self.owner.limit
        size = sum(p.ByteSize() for p in await self.owner.converter.encode([result]))
        if size <= limit:
            return result
        info = activity.info()
        subject: Any = input.args[0] if input.args else None
        where = ""
        if getattr(subject, "run_id", None) and getattr(subject, "step_id", None):
            where = f" (run {subject.run_id}, step {subject.step_id})"
        what = f"the result of {info.activity_type}{where}, attempt {info.attempt},"
        error = refusal(size, limit, what, HINTS.get(info.activity_type, DEFAULT_HINT))
        if self.owner.on_refused is not None:
            try:
                await self.owner.on_refused(subject, f"{PAYLOAD_TOO_LARGE}: {error.message}")
            except Exception as err:  # the refusal stands even if the mirror is away
                activity.logger.warning("could not record the refused result: %s", err)
        raise error


class _WorkflowGuard(WorkflowInboundInterceptor):
    """Measures with the workflow's payload converter: the same input always encodes to the
    same size, so the check is deterministic and replays the same way."""

    limit = DEFAULT_LIMIT_BYTES

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_WorkflowOutboundGuard(outbound, self.limit))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        result = await super().execute_workflow(input)
        _check(self.limit, [result], f"the result of workflow {workflow.info().workflow_type}")
        return result


class _WorkflowOutboundGuard(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, limit: int) -> None:
        super().__init__(next)
        self.limit = limit

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        _check(self.limit, input.args, f"the input of activity {input.activity}")
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        _check(self.limit, input.args, f"the input of local activity {input.activity}")
        return super().start_local_activity(input)

    async def start_child_workflow(
        self, input: StartChildWorkflowInput
    ) -> workflow.ChildWorkflowHandle[Any, Any]:
        _check(self.limit, input.args, f"the input of child workflow {input.id}")
        return await super().start_child_workflow(input)

    async def signal_child_workflow(self, input: SignalChildWorkflowInput) -> None:
        _check(self.limit, input.args, f"signal {input.signal} to {input.child_workflow_id}")
        await super().signal_child_workflow(input)

    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        _check(self.limit, input.args, f"signal {input.signal} to {input.workflow_id}")
        await super().signal_external_workflow(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        _check(self.limit, input.args, "the continue-as-new input")
        super().continue_as_new(input)


def _check(limit: int, values: Sequence[Any], what: str) -> None:
    if not values:
        return
    size = sum(p.ByteSize() for p in workflow.payload_converter().to_payloads(values))
    if size > limit:
        raise refusal(size, limit, what, DEFAULT_HINT)
