"""Deciding what a run waits for: approve or reject the action pending now, and list what the
caller's runs wait for (an inbox).

A decision is bound to the action pending now (its hash) and judged by the workflow
(agentledger.workflows.approvals): with a worker it goes as an update, so a refusal comes
back at once; when the run takes no more updates or no worker answers, as a signal the
server keeps in the run's history until a worker applies it with the same checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio.client import WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from agentledger.client import handles
from agentledger.client.scope import RunRef, Scope
from agentledger.core import bounds
from agentledger.core.approver_key import ApproverKey
from agentledger.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationError,
    OperationRefused,
    PolicyDenied,
)
from agentledger.core.identity import Identity
from agentledger.core.listings import InboxItem
from agentledger.core.messages import Message, RunMessages
from agentledger.core.results import DecisionResult, PendingApproval, RunState
from agentledger.core.spec import JsonDict
from agentledger.core.states import RunStatus
from agentledger.core.wire import ApproveInput, RejectInput
from agentledger.store import mirror_views
from agentledger.temporal.worker_presence import Deadline, NoAnswer, within
from agentledger.workflows import AgentRunWorkflow

# How long a decision sent as a signal waits to see the run apply it, within `--wait`.
SIGNAL_OUTCOME_SECONDS = 3.0

Decision = ApproveInput | RejectInput


class Approvals:
    """The decisions the caller's runs wait for: another tenant's run reads as missing."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def approve(
        self,
        run_id: str,
        *,
        by: str,
        role: str | None = None,
        edit: JsonDict | None = None,
        replace: JsonDict | None = None,
        action_hash: str | None = None,
        signer: ApproverKey | None = None,
        decider: Identity | None = None,
        wait: float | None = None,
    ) -> DecisionResult:
        """Approve the pending action (or, with `action_hash`, only that exact action the
        approver saw), in `role` (None: the one the approval asks for), with an `edit` (a
        JSON Merge Patch of its arguments: null removes a field) or a `replace`ment of them;
        with `signer`, signed by that approver's key. Who decides is the scope's caller when
        a credential proved it (`decider` is then the caller's, and the caller must hold the
        role the approval asks for), else `decider` (an approver's key, the operator)."""
        tenant = self.scope.tenant
        who = self._decider(decider)
        return await self._decide(
            run_id,
            RunMessages.APPROVE,
            lambda pending, required: ApproveInput(
                action_hash=action_hash or pending,
                by=self._by(by),
                role=role or required,
                edit=edit,
                replace=replace,
                tenant=tenant,
                decider=who,
            ),
            wait=wait,
            signer=signer,
        )

    async def reject(
        self,
        run_id: str,
        *,
        by: str,
        reason: str,
        role: str | None = None,
        action_hash: str | None = None,
        signer: ApproverKey | None = None,
        decider: Identity | None = None,
        wait: float | None = None,
    ) -> DecisionResult:
        """Reject the pending action, saying why: the run, its model and its receipt hear it."""
        if not reason.strip():
            raise InvalidRequest(
                "a rejection needs a reason (--reason TEXT): the run and its receipt record it"
            )
        tenant = self.scope.tenant
        who = self._decider(decider)
        return await self._decide(
            run_id,
            RunMessages.REJECT,
            lambda pending, required: RejectInput(
                action_hash=action_hash or pending,
                by=self._by(by),
                role=role or required,
                reason=reason,
                tenant=tenant,
                decider=who,
            ),
            wait=wait,
            signer=signer,
        )

    def _authenticated(self) -> bool:
        """Whether the scope's caller is a credential the door verified (a key, a token),
        not the operator or a program acting for a tenant."""
        return self.scope.caller.identity.kind != "operator"

    def _decider(self, decider: Identity | None) -> Identity | None:
        return self.scope.caller.identity if self._authenticated() else decider

    def _by(self, by: str) -> str:
        """The name a decision is recorded by: an authenticated caller's own."""
        return self.scope.caller.identity.name if self._authenticated() else by

    def _judge(self, pending: PendingApproval) -> None:
        """A credential decides an approval only in a role it holds: the approval's, never
        one the request names."""
        caller = self.scope.caller
        if self._authenticated() and not caller.decides_as(pending.required_role):
            held = ", ".join(sorted(caller.roles)) or "no role"
            raise PolicyDenied(
                f"{pending.tool} needs an approver in role {pending.required_role!r}; this "
                f"credential decides as {held} (an operator makes a key that does with "
                f"`agentledger keys create --tenant {self.scope.tenant_in_advice} --role approver "
                f"--decides {pending.required_role}`)"
            )

    async def pending(self, run_id: str, *, wait: float | None = None) -> PendingApproval:
        """The approval the run waits for now (a worker answers)."""
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        run = await self.scope.running(run_id, deadline)
        try:
            pending: PendingApproval | None = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.get_pending_approval, deadline
            )
            if pending is None:  # said in the run's own status words, as `status` says them
                state: RunState = await handles.ask_within(
                    client, run.handle, AgentRunWorkflow.state, deadline
                )
        except NoAnswer as err:
            raise NotAnswered(await handles.no_worker_note(client, run, deadline)) from err
        if pending is None:
            raise OperationRefused(
                f"run {run_id} is not waiting for an approval (status {state.status.value})"
            )
        return pending

    async def inbox(self, *, limit: int = 100) -> list[InboxItem]:
        """The approvals the caller's runs wait for, newest first, as the mirror shows them:
        each with its run, who the run is for, and its task."""
        rows = await mirror_views.pending_approvals(
            await self.scope.database(), tenant=self.scope.tenant, limit=limit
        )
        return [InboxItem.model_validate(row) for row in rows]

    async def _decide(
        self,
        run_id: str,
        intent: Message,
        decision: Callable[[str, str], Decision],
        *,
        wait: float | None,
        signer: ApproverKey | None,
    ) -> DecisionResult:
        """Send a decision bound to the action pending now; the workflow judges it.

        With a worker: an update, so a refusal comes back at once. When the run takes no
        more updates (its slots held by other clients, or its total spent) or no worker
        accepts it: a signal, which the server keeps in the run's history until a worker
        applies it with the same checks (a refusal is then recorded on the run). Without a
        worker the approval it answers comes from the mirror. The answer says which
        happened, and claims the run holds the decision only once the server confirmed it.
        """
        bounds.check(decision("0" * 16, "approver"), "decision")  # before anything is sent
        deadline = Deadline(self.scope.bound(wait))
        client = await self.scope.temporal(deadline.seconds)
        mirror = await self.scope.mirror()
        run = await self.scope.running(run_id, deadline)
        try:
            state: RunState = await handles.ask_within(
                client, run.handle, AgentRunWorkflow.state, deadline
            )
        except NoAnswer:
            if mirror is None:
                raise NotAnswered(
                    await handles.no_worker_note(client, run, deadline)
                    + "; or set DATABASE_URL, so decisions can be recorded while none runs"
                ) from None
            mirrored = await mirror_views.run_state(mirror, run_id)
            pending = mirrored[0].pending_approval if mirrored else None
            if pending is None:
                status = (await handles.last_status(run, mirror)).value
                raise OperationRefused(
                    f"run {run_id} is not waiting for an approval as far as the mirror knows "
                    f"(status {status}), and "
                    f"{await handles.no_worker_note(client, run, deadline)}"
                ) from None
            self._judge(pending)
            message = _signed(
                decision(pending.action_hash, pending.required_role), run_id, pending, signer
            )
            await handles.signal_within(run.handle, intent, message, deadline)
            return DecisionResult(
                approval_id=pending.approval_id,
                decision="recorded",
                status=RunStatus.WAITING_FOR_APPROVAL,
                note=handles.recorded("decision", run),
            )
        pending = state.pending_approval
        if pending is None:
            raise OperationRefused(
                f"run {run_id} is not waiting for an approval (status {state.status.value})"
            )
        self._judge(pending)
        message = _signed(
            decision(pending.action_hash, pending.required_role), run_id, pending, signer
        )
        try:
            accepted = await handles.admit_update(
                client, run.handle, intent, message, deadline.share(0.5)
            )
        except handles.NotAdmitted as err:
            await handles.signal_within(run.handle, intent, message, deadline)
            return await self._signalled(run, state, message, err.reason, deadline)
        try:
            return await within(  # type: ignore[no-any-return]
                deadline.left(), accepted.result(rpc_timeout=timedelta(seconds=deadline.left()))
            )
        except WorkflowUpdateFailedError as err:
            raise OperationRefused(f"refused: {handles.refusal(err)}") from err
        except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            return DecisionResult(
                approval_id=pending.approval_id,
                decision="recorded",
                status=RunStatus.WAITING_FOR_APPROVAL,
                note=(
                    "recorded: the run accepted the decision (its history holds it) and "
                    f"applies it at its next step; `agentledger status {run_id}` shows the "
                    "outcome"
                ),
            )

    async def _signalled(
        self, run: RunRef, before: RunState, message: Decision, why: str, deadline: Deadline
    ) -> DecisionResult:
        """A decision the server confirmed as a signal: what the run made of it, if it says
        so within a few seconds, else that the run holds it."""
        client = await self.scope.temporal(deadline.left())
        pending = before.pending_approval
        assert pending is not None
        seen = {r.model_dump_json() for r in before.refusals}
        waited = Deadline(min(SIGNAL_OUTCOME_SECONDS, deadline.left()))
        while waited.left() > 0.15:
            try:
                state: RunState = await handles.ask_within(
                    client, run.handle, AgentRunWorkflow.state, waited
                )
            except (NoAnswer, OperationError):
                break
            refused = [
                r
                for r in state.refusals
                if r.model_dump_json() not in seen
                and r.by == message.by
                and r.approval_id in (None, pending.approval_id)
            ]
            if refused:
                raise OperationRefused(f"refused and recorded: {refused[-1].reason}")
            decided = next((d for d in state.decided if d.approval_id == pending.approval_id), None)
            if decided is not None and decided.by != message.by:
                raise OperationRefused(
                    f"not applied: {decided.by or 'nobody'} decided this approval first "
                    f"({decided.decision}); the run ignores the later decision, recording it"
                )
            if decided is not None:
                return DecisionResult(
                    approval_id=pending.approval_id,
                    decision=decided.decision,
                    status=state.status,
                    note=f"sent as a signal: {why}",
                )
            await asyncio.sleep(0.1)
        return DecisionResult(
            approval_id=pending.approval_id,
            decision="recorded",
            status=RunStatus.WAITING_FOR_APPROVAL,
            note=(
                f"recorded: {why}, so the decision went as a signal; the run holds it in its "
                "history and applies it, with the same checks, at its next step; "
                f"`agentledger status {run.handle.id}` shows the outcome"
            ),
        )


def _signed(
    decision: Decision, run_id: str, pending: PendingApproval, signer: ApproverKey | None
) -> Decision:
    if signer is None:
        return decision
    return decision.model_copy(
        update={"signature": signer.sign(run_id, pending.approval_id, decision)}
    )
