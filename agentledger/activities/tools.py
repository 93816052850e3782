"""`tool.invoke`: run one tool call, exactly once where it has a side effect.

A transactional tool claims its idempotency key and performs its effect in one Postgres
transaction; a retry after a crash finds the key and returns the recorded result. An
external tool commits its claim first; a retry that finds a claim without a result does
not act blindly: the tool's reconcile hook (or a person) says whether the effect happened.
Every result is screened for prompt injection before the model sees it. Secrets the tool
marks are replaced by their markers (agentledger.store.vault) before anything leaves the
activity.
An eval case's run (agentledger.core.eval_cases) is answered from its recording instead: no
tool runs and nothing is claimed in the ledger, so a side effect never happens again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ValidationError
from temporalio import activity

from agentledger.activities.agent_metrics import record_mirror_lag
from agentledger.activities.agent_spans import AgentSpans
from agentledger.activities.leases import heartbeat, hold_lease, once_postgres_answers
from agentledger.activities.retry_notes import announce_retry
from agentledger.activities.step_claim import StepClaim
from agentledger.core import errors, faults, injection
from agentledger.core.constants import ACTIVITY_TOOL_INVOKE
from agentledger.core.errors import SecretUnavailable
from agentledger.core.eval_cases import ToolUse, is_eval_run
from agentledger.core.spec import JsonDict
from agentledger.core.wire import ToolCallInput, ToolCallResult
from agentledger.store import eval_store, ledger
from agentledger.store.artifacts import ArtifactStore
from agentledger.store.db import transaction_if_used
from agentledger.store.mirror_store import AttemptEnd, MirrorStore
from agentledger.store.refused_data import refused_data_is_final
from agentledger.store.vault import MARKER, SecretScope, SecretVault
from agentledger.tools import ToolContext, ToolRegistry
from agentledger.tools.registry import (
    CheckpointSaver,
    Reconciled,
    Tool,
    ToolError,
    ToolForbidden,
    UnknownToolError,
    compact_errors,
)


class ToolActivities:
    def __init__(
        self,
        registry: ToolRegistry,
        pool: AsyncConnectionPool,
        store: MirrorStore,
        identity: str,
        *,
        commits: MirrorStore,
        artifacts: ArtifactStore,
        artifact_threshold: int,
        vault: SecretVault,
        spans: AgentSpans | None = None,
    ) -> None:
        self.spans = spans or AgentSpans(enabled=False)
        self.vault = vault
        self.artifacts = artifacts
        self.artifact_threshold = artifact_threshold
        self.identity = identity
        self.registry = registry
        self.pool = pool
        self.store = store
        # The mirror over a pool of its own (agentledger.store.db.commit_pool_beside), for what
        # a call commits while it holds a connection of `pool`: checkpoints and its lease.
        self.commits = commits

    @activity.defn(name=ACTIVITY_TOOL_INVOKE)
    async def invoke(self, input: ToolCallInput) -> ToolCallResult:
        with self.spans.tool_call(input) as span:
            with refused_data_is_final():
                result = await self._invoke(input)
            span.ended(result)
            return result

    async def _invoke(self, input: ToolCallInput) -> ToolCallResult:
        info = activity.info()
        record_mirror_lag(input.mirror)
        try:
            tool = self.registry.get(input.tool)
        except UnknownToolError as err:
            raise errors.unknown_tool(str(err)) from err
        recorded = await self._recorded(tool, input) if is_eval_run(input.run_id) else None
        scope = SecretScope()
        try:
            arguments = await self._open_secrets(tool, input, scope)
        except SecretUnavailable as err:
            return await self._refused(input, str(err))
        try:
            args = tool.parse_arguments(arguments)
        except ValidationError as err:
            error = f"arguments failed validation: {compact_errors(err)}"
            return await self._refused(input, scope.redact(error))

        def write_claim(end: AttemptEnd | None, started_at: datetime) -> Awaitable[JsonDict]:
            return self.store.begin_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                seq=input.seq,
                type="tool_call",
                name=tool.name,
                attempt=info.attempt,
                worker=self.identity,
                lease_seconds=input.heartbeat_seconds,
                input=scope.redact(input.arguments),
                idempotency_key=input.idempotency_key if tool.side_effect else None,
                batch=input.mirror,
                end=end,
                started_at=started_at,
            )

        claim = StepClaim(
            self.store,
            write_claim,
            run_id=input.run_id,
            step_id=input.step_id,
            attempt=info.attempt,
            heartbeat_seconds=input.heartbeat_seconds,
            carries_batch=input.mirror is not None,
        )
        try:
            return await self._run(tool, args, input, scope, claim, recorded)
        finally:
            claim.abandon()

    async def _recorded(self, tool: Tool, input: ToolCallInput) -> ToolCallResult | None:
        """An eval case's call, answered from its recording; None: run the tool (not a case's
        run, or a read-only call past a divergence the eval lets run live). A call the
        recording lacks stops the case: the run pauses, as for a refused permission."""
        found = await eval_store.answer(
            self.pool,
            run_id=input.run_id,
            step_id=input.step_id,
            step=input.seq,
            call=ToolUse(tool=tool.name, arguments=input.arguments),
        )
        if found is None:
            return None
        attempt = activity.info().attempt
        if found.recorded is not None:
            call = found.recorded
            return ToolCallResult(ok=call.ok, output=call.output, error=call.error, attempt=attempt)
        if found.live_read_only and not tool.side_effect:
            return None
        raise errors.eval_diverged(tool.name, attempt)

    async def _run(
        self,
        tool: Tool,
        args: BaseModel,
        input: ToolCallInput,
        scope: SecretScope,
        claim: StepClaim,
        recorded: ToolCallResult | None = None,
    ) -> ToolCallResult:
        info = activity.info()
        # A first attempt of a tool without side effects needs nothing from its claim before
        # it runs: no ledger entry, no checkpoint of an earlier attempt to resume from.
        saved = await claim.begin(
            deferred=(recorded is not None or not tool.side_effect) and info.attempt == 1
        )
        await announce_retry(self.store, input.run_id, input.step_id)
        checkpoint: JsonDict = {**input.checkpoint, **saved}
        patch: JsonDict = dict(saved)
        faults.fire("tool.before_run", tool.name)
        await faults.zombie(tool.name, info.attempt)

        async def save_checkpoint(update: JsonDict) -> None:
            update = scope.redact(update)
            patch.update(update)
            checkpoint.update(update)
            await claim.written()  # the checkpoint is saved on the claimed row
            await self.commits.save_step_checkpoint(
                run_id=input.run_id, step_id=input.step_id, attempt=info.attempt, patch=update
            )

        try:
            async with hold_lease(
                self.commits,
                run_id=input.run_id,
                step_id=input.step_id,
                heartbeat_seconds=input.heartbeat_seconds,
            ):
                if recorded is not None:
                    outcome = recorded
                elif tool.side_effect and not tool.transactional:
                    outcome = await self._external(
                        tool, args, input, checkpoint, save_checkpoint, scope
                    )
                else:
                    outcome = await self._transactional(
                        tool, args, input, checkpoint, save_checkpoint, scope
                    )
        except ToolForbidden as err:
            reason = scope.redact(str(err))
            await self._fail(claim, f"forbidden: {reason}")
            raise errors.tool_forbidden(tool.name, reason, info.attempt) from (
                err if reason == str(err) else None
            )
        except ToolError as err:
            reason = scope.redact(str(err))
            await self._fail(claim, reason)
            return ToolCallResult(ok=False, error=reason, attempt=info.attempt)
        except Exception as err:
            reason = scope.redact(str(err))
            await self._fail(claim, f"{type(err).__name__}: {reason}")
            if reason == str(err):
                raise
            # The message quoted a secret: raise it without the original, which would carry
            # the value into history and the worker's log.
            raise errors.reworded(err, reason) from None
        if outcome.unknown_outcome:
            await self._fail(claim, outcome.error or "unknown outcome")
            return outcome
        faults.fire("tool.after_effect", tool.name)
        output = await self.artifacts.offload(
            outcome.output,
            run_id=input.run_id,
            step_id=input.step_id,
            name=f"{tool.name}.json",
            threshold=self.artifact_threshold,
        )
        await claim.end(AttemptEnd("succeeded", output=output))
        return outcome.model_copy(
            update={
                "output": output,
                "checkpoint_patch": patch,
                "suspicious": injection.scan(outcome.output),
            }
        )

    async def _transactional(
        self,
        tool: Tool,
        args: BaseModel,
        input: ToolCallInput,
        checkpoint: JsonDict,
        save_checkpoint: CheckpointSaver,
        scope: SecretScope,
    ) -> ToolCallResult:
        """Effect and ledger in one transaction: after a crash, either both or neither. A tool
        without a side effect gets the transaction only if it sends a statement."""
        attempt = activity.info().attempt
        async with (
            self.pool.connection() as conn,
            conn.transaction() if tool.side_effect else transaction_if_used(conn),
        ):
            if tool.side_effect:
                act, recorded = await ledger.claim(
                    conn,
                    key=input.idempotency_key,
                    run_id=input.run_id,
                    step_id=input.step_id,
                    tool=tool.name,
                    attempt=attempt,
                )
                if not act:
                    return ToolCallResult(
                        ok=True, output=recorded, duplicate_prevented=True, attempt=attempt
                    )
            context = self._context(input, checkpoint, conn, save_checkpoint, scope)
            output = await self._seal(tool, input.run_id, scope, await tool.fn(args, context), conn)
            if tool.side_effect:
                await ledger.complete(conn, key=input.idempotency_key, result=output)
        return ToolCallResult(ok=True, output=output, attempt=attempt)

    async def _external(
        self,
        tool: Tool,
        args: BaseModel,
        input: ToolCallInput,
        checkpoint: JsonDict,
        save_checkpoint: CheckpointSaver,
        scope: SecretScope,
    ) -> ToolCallResult:
        """A committed claim, the effect, then the record; a stale claim is reconciled."""
        attempt = activity.info().attempt
        key = input.idempotency_key
        # The lock's connection first: a call never holds its working connection while it
        # waits for the lock's (see agentledger.store.db.RESERVED_CONNECTIONS).
        async with ledger.locked(self.pool, key) as mine, self.pool.connection() as conn:
            if not mine:
                raise errors.effect_in_progress(tool.name, key)
            context = self._context(input, checkpoint, conn, save_checkpoint, scope)
            state, recorded = await ledger.claim_external(
                conn,
                key=key,
                run_id=input.run_id,
                step_id=input.step_id,
                tool=tool.name,
                attempt=attempt,
            )
            if state == "done":
                await ledger.count_duplicate(conn, key)
                return ToolCallResult(
                    ok=True, output=recorded, duplicate_prevented=True, attempt=attempt
                )
            reconciliation = None
            if state == "started":  # an earlier attempt claimed it and never finished
                # A person's answer covers the claim they were shown, made by an earlier
                # step; a claim this step made (a re-run that died) is unknown again.
                decided = input.resolution if recorded != input.step_id else None
                verdict = await self._reconcile(tool, args, context, decided)
                if verdict is None:
                    return ToolCallResult(
                        ok=False,
                        unknown_outcome=True,
                        attempt=attempt,
                        error=f"{tool.name} may or may not have happened (key {key}): an "
                        "earlier attempt died mid-effect and the tool has no reconcile hook",
                    )
                if verdict.happened:
                    reconciliation = f"happened ({verdict.by})"
                    result = await self._seal(tool, input.run_id, scope, verdict.result, conn)
                    await ledger.complete(
                        conn, key=key, result=result, reconciliation=reconciliation
                    )
                    await ledger.count_duplicate(conn, key)
                    return ToolCallResult(
                        ok=True,
                        output=result,
                        duplicate_prevented=True,
                        reconciliation=reconciliation,
                        attempt=attempt,
                    )
                reconciliation = f"not happened ({verdict.by})"
                await ledger.reclaim(conn, key=key, step_id=input.step_id, attempt=attempt)
            output = await self._seal(tool, input.run_id, scope, await tool.fn(args, context), conn)
            faults.fire("tool.after_external_effect", tool.name)
            await ledger.complete(conn, key=key, result=output, reconciliation=reconciliation)
            return ToolCallResult(
                ok=True, output=output, reconciliation=reconciliation, attempt=attempt
            )

    async def _reconcile(
        self,
        tool: Tool,
        args: BaseModel,
        context: ToolContext,
        resolution: Literal["rerun", "skip"] | None,
    ) -> Reconciled | None:
        """Did the effect happen? A person decided; failing that, the tool's hook knows."""
        if resolution == "rerun":
            return Reconciled(happened=False, by="person")
        if resolution == "skip":
            return Reconciled(
                happened=True, result={"skipped": "a person resolved it"}, by="person"
            )
        if tool.reconcile is None:
            return None
        return await tool.reconcile(args, context)

    def _context(
        self,
        input: ToolCallInput,
        checkpoint: JsonDict,
        conn: AsyncConnection[Any],
        save_checkpoint: CheckpointSaver,
        scope: SecretScope,
    ) -> ToolContext:
        return ToolContext(
            run_id=input.run_id,
            step_id=input.step_id,
            idempotency_key=input.idempotency_key,
            checkpoint=checkpoint,
            conn=conn,
            save_checkpoint=save_checkpoint,
            # Heartbeat details are kept in history too.
            heartbeat=lambda *details: heartbeat(*scope.redact(list(details))),
            secrets=scope,
        )

    async def _open_secrets(self, tool: Tool, input: ToolCallInput, scope: SecretScope) -> JsonDict:
        """The arguments the tool runs with: markers in its secret arguments opened.

        Only declared secret arguments are opened, so a marker the model pastes into any
        other argument stays a marker. A raw value in a secret argument is marked, so it is
        redacted wherever the tool's output or errors repeat it.
        """
        arguments = dict(input.arguments)
        secret = {
            name: value
            for name in tool.secret_args
            if isinstance(value := arguments.get(name), str) and value
        }
        ids = [i for value in secret.values() for i in MARKER.findall(value)]
        opened = await self.vault.open(input.run_id, ids) if ids else {}
        for secret_id, value in opened.items():
            scope.known(secret_id, value)
        for name, value in secret.items():
            if MARKER.search(value):
                arguments[name] = MARKER.sub(lambda m: opened[m.group(1)], value)
            else:
                scope.mark(value)
        return arguments

    async def _seal(
        self,
        tool: Tool,
        run_id: str,
        scope: SecretScope,
        output: Any,
        conn: AsyncConnection[Any],
    ) -> Any:
        """The output with every secret replaced by its marker, the new secrets sealed in the
        vault first (on the connection the call holds), so every marker that leaves the
        activity opens later."""
        if tool.secret_results and isinstance(output, dict):
            output = dict(output)
            for name in tool.secret_results:
                value = output.get(name)
                if isinstance(value, str) and value:
                    scope.mark(value)
                elif value is not None and value != "":
                    output[name] = scope.mark(json.dumps(value, default=str))
        output = scope.redact(output)
        await self.vault.seal(run_id, scope, conn)
        return output

    async def _refused(self, input: ToolCallInput, error: str) -> ToolCallResult:
        """A call refused before it could claim its step: the mirror batch it carries still
        lands, since the run counts it written once this activity completes."""
        if input.mirror is not None:
            batch = input.mirror
            await once_postgres_answers(lambda: self.store.sync(batch), input.heartbeat_seconds)
        return ToolCallResult(ok=False, error=error, attempt=activity.info().attempt)

    async def _fail(self, claim: StepClaim, error: str) -> None:
        await claim.end(AttemptEnd("failed", error=error))
