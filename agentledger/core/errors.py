"""Every error agentledger raises, and every kind of failure it classifies, in one place;
Temporal alone owns retries.

Two families. Errors for people all derive from `AgentLedgerError`; each carries the exit code
the `agentledger` command ends with through one of its public
subclasses, `InvalidInput` (2), `NotFound` (3), `Unreachable` (4) and `Refused` (5), and a
message that says what to do next; any other `AgentLedgerError` is a runtime failure (1).
Failures of steps become ApplicationErrors whose `type`, `non_retryable` flag and
`next_retry_delay` tell Temporal what to do (SDK clients are built with max_retries=0); the run
workflow reads them back with `error_kind` and `cause`, and treats FINAL_ERRORS as beyond any
retry or fallback. (A provider's or Postgres's own exceptions are read where they are met:
`agentledger.activities.model_errors`, `agentledger.store.refused_data`; this module
imports neither client.)"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import ClassVar

from pydantic import ValidationError
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
    RetryState,
    TimeoutError,
)

# ---------------------------------------------------------------- errors for people


class AgentLedgerError(Exception):
    """What agentledger raises for people: the message says what happened and what to do next;
    `exit_code` is what the `agentledger` command exits with, `kind` its name under `--json`."""

    exit_code: ClassVar[int] = 1
    kind: ClassVar[str] = "failure"


class InvalidInput(AgentLedgerError):
    """A request that cannot be carried out as written: a bad flag, file, spec or setting."""

    exit_code = 2
    kind = "invalid_input"


class NotFound(AgentLedgerError):
    """No such run (another tenant's run reads the same), backlog or record."""

    exit_code = 3
    kind = "not_found"


class Unreachable(AgentLedgerError):
    """A service the request needs did not answer: Temporal, Postgres or a worker."""

    exit_code = 4
    kind = "unreachable"


class Refused(AgentLedgerError):
    """Refused by policy (a cap, a role, a signature) or by the run (it has ended, it waits
    for no approval)."""

    exit_code = 5
    kind = "refused"


# The classes below are the ones agentledger raises; each has the public class that says what
# it means first among its bases, so it carries that class's exit code.


class SetupError(InvalidInput):
    """A setting is wrong or a service is missing; the message says how to provide or fix it."""


class ServiceUnreachable(Unreachable):
    """Temporal or Postgres cannot be reached at the address the settings name."""


class ConnectionSettingsError(SetupError):
    """The Temporal profile or TLS files cannot be read; the message says which."""


def problems(err: ValidationError, whole: str = "input") -> str:
    """A pydantic refusal in one line: each field's problem (`whole` names the object)."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or whole}: {str(e['msg']).removeprefix('Value error, ')}"
        for e in err.errors()
    )


class OperationError(AgentLedgerError):
    """A failed operation on a run; the message is for a person. The subclasses below say
    why it failed, where that is known."""


class RuleNotFound(NotFound, OperationError):
    """No such standing approval, or not the caller's tenant's: the two read the same."""


class InvalidRequest(InvalidInput, OperationError):
    """An operation asked with arguments it cannot take."""


class RunNotFound(NotFound, OperationError):
    """No such run, or not the caller's tenant's: the two read the same."""


class NotAnswered(Unreachable, OperationError):
    """No worker (or no server) answered within the command's wait."""


class OperationRefused(Refused, OperationError):
    """The run or its policy refused the operation: the message says why."""


class BudgetExceeded(OperationRefused):
    """An enforcing budget of the tenant (or of the caller's credential) is spent: nothing
    starts until it resets (`reset_at`; over HTTP, 429 with Retry-After)."""

    def __init__(self, message: str, reset_at: datetime) -> None:
        super().__init__(message)
        self.reset_at = reset_at

    def retry_after(self, now: datetime) -> int:
        """Whole seconds until the budget resets (at least one)."""
        return max(1, math.ceil((self.reset_at - now).total_seconds()))


class UnverifiedDelivery(InvalidRequest):
    """A webhook delivery whose signature does not hold (or to no hook the caller may
    reach): nothing starts; over HTTP, 401."""


class PolicyDenied(Refused, OperationError):
    """The tenant's policy does not let this caller do it (an agent it may not run, a spec of
    its own, a decision outside its role): the message says what the policy allows."""

    kind = "forbidden"


class IdempotencyConflict(Refused, OperationError):
    """An idempotency key already named a run started from a different request."""

    kind = "idempotency_conflict"

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class StackInUse(Refused, SetupError):
    """Another command owns the embedded stack kept in this folder; the message names it."""


class TenantError(InvalidInput, OperationError):
    """A refused tenant change."""


class ForkError(Refused, OperationError):
    """The run cannot be forked there; the message says why and what to do."""


class DeploymentError(Refused, OperationError):
    """The version cannot be made current; the message says what to do."""


class ToolLoadError(SetupError):
    """A tool source (`agentledger-worker --tools`) that does not load; the message names it."""


class McpSetupError(SetupError):
    """An MCP server (`agentledger-worker --mcp`) that cannot be started or listed."""


class ToolSetConflict(SetupError):
    """Another live worker on the task queue has other tools."""


class ProfileError(InvalidInput, OperationError):
    """An agent profile source that does not load, or a name it lacks; the message says which."""


class UnknownEncryptionKey(SetupError):
    """A payload names a key id this process does not hold (AGENTLEDGER_ENCRYPTION_KEYS)."""


# Raised and caught inside a tool activity, which turns it into the call's error: never
# raised to a person, so not an AgentLedgerError.
class SecretUnavailable(LookupError):
    """A marker that does not open here: not this run's, or sealed under a key we lack."""


# ---------------------------------------------------------------- failures of steps

# Error types a run treats as final; listed so workflows can recognise them.
PERMISSION_DENIED = "PermissionDenied"
BAD_REQUEST = "BadRequest"
RATE_LIMITED = "RateLimited"
PROVIDER_UNAVAILABLE = "ProviderUnavailable"
UNKNOWN_TOOL = "UnknownTool"
# A payload over Temporal's blob size limit (agentledger.core.payload_limits): no retry sends less.
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
# Another attempt holds an external tool's claim: retry later, it may finish meanwhile.
EFFECT_IN_PROGRESS = "EffectInProgress"
# The Docker engine or the image `run_code` needs is not there: retried until it is.
SANDBOX_UNAVAILABLE = "SandboxUnavailable"

# The tenant's (or the credential's) enforcing budget is spent: the run ends
# `budget_exhausted` (agentledger.core.budgets).
BUDGET_EXHAUSTED = "BudgetExhausted"
# A model call on a run's own queue whose tenant has a model-call rate now: the run sends it,
# and its later calls, through the rate-limited queue (agentledger.workflows.steering).
MODEL_CALLS_RATED = "ModelCallsRated"

# Failures that no other model or another try will fix.
FINAL_ERRORS = frozenset(
    {PERMISSION_DENIED, BAD_REQUEST, UNKNOWN_TOOL, PAYLOAD_TOO_LARGE, BUDGET_EXHAUSTED}
)

# Postgres refused the values themselves (out of range, a broken constraint): the same write
# fails however often it is retried.
DATA_REFUSED = "DataRefused"


def provider_too_slow(seconds: float) -> ApplicationError:
    """The provider sent no whole answer in the time the step allows: retried like an outage,
    and said in words, before Temporal's own timeout would say only that the step timed out."""
    return ApplicationError(
        f"model provider unavailable: no complete answer within {seconds:.0f} s "
        "(timeouts.model_seconds)",
        type=PROVIDER_UNAVAILABLE,
    )


def budget_exhausted(reason: str) -> ApplicationError:
    """A model call its budget refuses: no retry, no fallback model helps until it resets."""
    return ApplicationError(
        f"budget exhausted: {reason}", type=BUDGET_EXHAUSTED, non_retryable=True
    )


def model_calls_rated(tenant: str) -> ApplicationError:
    """The call came by the run's own queue, but its tenant has a model-call rate now: not
    made here (no attempt, no mirror write), so the run schedules it where the rate holds."""
    return ApplicationError(
        f"tenant {tenant!r} has a model-call rate: this call goes through the rate-limited queue",
        type=MODEL_CALLS_RATED,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,  # expected: the worker does not log it
    )


def unknown_tool(message: str) -> ApplicationError:
    """The model named a tool this worker does not have: no retry will find it."""
    return ApplicationError(message, type=UNKNOWN_TOOL, non_retryable=True)


def tool_forbidden(tool: str, reason: str, attempt: int) -> ApplicationError:
    """A tool was refused permission: final, and by default the run waits for a person. The
    attempt goes along, so the run records which one was refused (`attempts_made`)."""
    return ApplicationError(
        f"{tool} was refused permission: {reason}",
        {"attempt": attempt},
        type=PERMISSION_DENIED,
        non_retryable=True,
    )


def eval_diverged(tool: str, attempt: int) -> ApplicationError:
    """An eval case's run called what its recording lacks: the case stops there, paused as
    for a refused permission, and the eval reads the divergence and ends the run."""
    return ApplicationError(
        f"{tool}: this eval case's recording has no such call (a divergence); the case stops",
        {"attempt": attempt},
        type=PERMISSION_DENIED,
        non_retryable=True,
    )


def effect_in_progress(tool: str, key: str) -> ApplicationError:
    return ApplicationError(
        f"another attempt is still performing {tool} ({key}); retrying later",
        type=EFFECT_IN_PROGRESS,
    )


def reworded(err: Exception, message: str) -> ApplicationError:
    """`err` classified as it was, with another message (one that quotes no secret)."""
    return ApplicationError(
        message,
        type=err.type if isinstance(err, ApplicationError) else type(err).__name__,
        non_retryable=isinstance(err, ApplicationError) and err.non_retryable,
    )


def as_activity_error(err: ApplicationError | TimeoutError, activity: str) -> ActivityError:
    """A local activity's final failure as a remote one's reaches the workflow: an
    ActivityError caused by it. The SDK hands a local activity's failure over bare, and an
    ApplicationError a workflow raises fails the whole run, where a tool's failure is the
    step's, which the model hears. A failure it could retry reaches the workflow only once
    its retry policy's attempts are spent (the run's policies set a maximum)."""
    final = isinstance(err, ApplicationError) and err.non_retryable
    wrapped = ActivityError(
        "Local activity task failed",
        scheduled_event_id=0,
        started_event_id=0,
        identity="",
        activity_type=activity,
        activity_id="",
        retry_state=(
            RetryState.NON_RETRYABLE_FAILURE if final else RetryState.MAXIMUM_ATTEMPTS_REACHED
        ),
    )
    wrapped.__cause__ = err
    return wrapped


def error_kind(err: ActivityError) -> str:
    """The classified type of an activity's final failure ("Timeout" for a timeout)."""
    if isinstance(err.cause, ApplicationError):
        return err.cause.type or "ApplicationError"
    if isinstance(err.cause, TimeoutError):
        return "Timeout"
    return type(err.cause).__name__


def attempts_made(err: ActivityError, max_attempts: int) -> int:
    """How many attempts an activity made before it failed for good: all it had if its
    retries ran out, else the number the activity reported in its error's details."""
    if err.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return max_attempts
    if isinstance(err.cause, ApplicationError):
        for detail in err.cause.details:
            if isinstance(detail, dict) and isinstance(detail.get("attempt"), int):
                return int(detail["attempt"])
    return 1


def cause(err: ActivityError) -> str:
    """What went wrong, for the step's record and the run's error."""
    return err.cause.message if isinstance(err.cause, ApplicationError) else str(err.cause or err)


def sandbox_unavailable(detail: str) -> ApplicationError:
    """`run_code` could not reach its engine or image: nothing ran, so another try is safe,
    and the status says why the step waits."""
    return ApplicationError(f"sandbox unavailable: {detail}", type=SANDBOX_UNAVAILABLE)


# What Temporal's payload converter raises (a KeyError, sometimes quoted inside a replay's
# failure) for a payload sealed by a codec the process lacks.
SEALED_PAYLOAD = re.compile(r"Unknown payload encoding ([\w./+-]+)")
# agentledger's own encryption (agentledger.temporal.encryption.ENCODING), which names its own fix.
OWN_ENCODING = "binary/encrypted"


def sealed_payload(err: BaseException) -> SetupError | None:
    """What to do, when `err` (or what caused it) is a payload sealed by a codec this process
    lacks (agentledger.temporal.user_codec); None for any other error."""
    seen: BaseException | None = err
    while seen is not None:
        found = SEALED_PAYLOAD.search(str(seen))
        if found and found[1] == OWN_ENCODING:  # agentledger's own: its keys are the fix
            return None
        if found:
            return SetupError(
                f"the run's payloads are sealed by a codec ({found[1]}): set "
                "AGENTLEDGER_CODEC=PKG.MODULE:ATTR (your app's PayloadCodec, or what makes it) "
                "or AGENTLEDGER_CODEC_ENDPOINT=URL (your codec server), as your app's client has it"
            )
        seen = seen.__cause__ or seen.__context__
    return None
