"""Human approvals: a run waits, holding no worker, for a person's decision.

A component of AgentRunWorkflow, which keeps the update, signal and query handlers. A risky
tool call, an over-budget run, a suspected prompt
injection and a tool call of unknown outcome all become a PendingApproval that people
decide through the updates (refused by their validators, with a reason a person can act
on, without changing anything) or the signals (which cannot be refused, so one that does
not fit is recorded as an event and ignored).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentledger.workflows.recording import RunContext, approval_input
from agentledger.workflows.run_state import RunEnded
from agentledger.workflows.steps import Step

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from agentledger.core import approval_signatures, bounds
    from agentledger.core.argument_schema import argument_problems, unknown_fields
    from agentledger.core.events import EventType
    from agentledger.core.keys import action_hash
    from agentledger.core.results import (
        ApprovalKind,
        ApprovalRecord,
        DecisionResult,
        PendingApproval,
        RefusedDecision,
    )
    from agentledger.core.spec import Budget, JsonDict
    from agentledger.core.states import RunStatus, StepStatus, is_terminal
    from agentledger.core.wire import ApproveInput, RejectInput
    from agentledger.workflows import policies


def decision_fields(
    input: ApproveInput | RejectInput,
) -> tuple[str, str, str, str | None, JsonDict | None]:
    edit = input.edit if isinstance(input, ApproveInput) else None
    return input.action_hash, input.by, input.role, input.tenant, edit


def check_bounds(input: ApproveInput | RejectInput) -> None:
    """Refuse a decision with a field over its maximum (agentledger.core.bounds): checked first,
    so nothing of it is recorded (a signal's refusal is recorded once, cut short)."""
    found = bounds.problems(input)
    if found:
        raise ApplicationError(f"decision refused: {'; '.join(found[:5])}")


def check_edit(pending: PendingApproval, edit: JsonDict) -> None:
    """An edit must be one the run can apply to this kind of approval."""
    if pending.kind == "budget":
        try:
            Budget.model_validate(edit)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'edit'}: {e['msg']}" for e in err.errors()
            )
            raise ApplicationError(
                f"invalid budget edit ({problems}): give max_tokens and/or max_cost_usd, "
                "each above 0"
            ) from None
    elif pending.kind != "action":
        raise ApplicationError(
            f"an edit applies to an action or a budget, not to a {pending.kind} approval: "
            "approve or reject it without one"
        )
    elif pending.parameters is not None:
        found = unknown_fields(pending.parameters, edit) or argument_problems(
            pending.parameters, {**pending.arguments, **edit}
        )
        if found:
            raise ApplicationError(
                f"invalid edit of {pending.tool}'s arguments ({'; '.join(found)}): the tool "
                "would refuse them; approve with arguments it accepts, or reject"
            )


# Refused decisions a run keeps in its state for `status`.
MAX_REFUSALS = 10


class Approvals:
    """People's decisions a run waits for, and the checks a decision must pass first."""

    def __init__(
        self,
        run: RunContext,
        tell_parent: Callable[[PendingApproval | None], Awaitable[None]],
    ) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        # A sub-agent's run tells its parent of the approval it waits for (Subagents).
        self.tell_parent = tell_parent

    async def approval_step(
        self,
        tool: str,
        arguments: JsonDict,
        parameters: JsonDict | None = None,
        risk: str | None = None,
    ) -> JsonDict | None:
        """A risky call waits for a person; returns the arguments to run, or None."""
        record = await self.await_human("action", tool, arguments, parameters=parameters, risk=risk)
        if record.decision == "approved":
            return record.final_arguments
        if record.decision == "expired":
            raise RunEnded(RunStatus.FAILED, f"approval for {tool} expired unanswered")
        if self.spec.approval.on_reject == "cancel":
            raise RunEnded(RunStatus.CANCELLED, f"approval for {tool} rejected: {record.reason}")
        self.recorder.set_status(RunStatus.PLANNING)
        return None

    async def enforce_budget(self) -> None:
        """Over budget: a person may extend it (seeing what was spent) or end the run."""
        while over := policies.over_budget(
            self.progress.budget,
            self.progress.tokens_in + self.progress.tokens_out,
            self.progress.cost_usd,
        ):
            if self.spec.failures.on_budget_exceeded == "fail":
                raise RunEnded(RunStatus.FAILED, over)
            spent = {
                "spent_tokens": self.progress.tokens_in + self.progress.tokens_out,
                "spent_cost_usd": self.progress.cost_usd,
                **self.progress.budget.model_dump(),
            }
            record = await self.await_human("budget", "budget", spent, reason=over)
            if record.decision == "rejected":
                raise RunEnded(RunStatus.CANCELLED, f"{over}; the budget was not extended")
            if record.decision == "expired":
                raise RunEnded(RunStatus.FAILED, f"{over}; nobody extended the budget in time")
            self.progress.budget = policies.extend_budget(
                self.progress.budget,
                self.spec.budget,
                record.edit,
                spent=(spent["spent_tokens"], spent["spent_cost_usd"]),
            )
            self.recorder.event(EventType.BUDGET_EXTENDED, data=self.progress.budget.model_dump())

    async def await_human(
        self,
        kind: ApprovalKind,
        tool: str,
        arguments: JsonDict,
        reason: str | None = None,
        *,
        parameters: JsonDict | None = None,
        risk: str | None = None,
    ) -> ApprovalRecord:
        """Wait, holding no worker, for a person's decision, or for the approval to expire."""
        policy = self.spec.approval
        async with self.recorder.step("approval", tool) as step:
            pending = self._pending(step, kind, tool, arguments, reason, parameters, risk)
            self.progress.pending_approval, self.progress.decision = pending, None
            self.recorder.show_details()  # the Web UI names what the run waits for
            step.input = approval_input(pending)
            self.recorder.event(
                EventType.APPROVAL_REQUESTED, step.id, pending.model_dump(mode="json")
            )
            step.report(StepStatus.WAITING)
            await self.recorder.flush()
            await self.tell_parent(pending)  # a sub-agent's run: its parent shows the approval
            try:
                await workflow.wait_condition(
                    lambda: self.progress.decision is not None,
                    timeout=timedelta(seconds=policy.timeout_seconds),
                )
            except TimeoutError:
                pass
            decision, self.progress.decision, self.progress.pending_approval = (
                self.progress.decision,
                None,
                None,
            )
            # Recorded before anything awaits: the update that sent the decision answers with
            # what is recorded once the approval is no longer pending (`decide_by_update`).
            record = self._approval_record(pending, decision)
            self.progress.approvals.append(record)
            step.end(
                StepStatus(record.decision),
                output=record.model_dump(mode="json"),
                finished_at=record.decided_at,
            )
        self.recorder.event(
            EventType.decided(record.decision), step.id, {"by": record.by, "kind": kind}
        )
        await self.tell_parent(None)
        return record

    def _pending(
        self,
        step: Step,
        kind: ApprovalKind,
        tool: str,
        arguments: JsonDict,
        reason: str | None,
        parameters: JsonDict | None,
        risk: str | None = None,
    ) -> PendingApproval:
        """What people are asked to decide at `step`, under the run's approval policy."""
        policy = self.spec.approval
        now = workflow.now()
        return PendingApproval(
            kind=kind,
            reason=reason,
            approval_id=step.id,
            step_id=step.id,
            tool=tool,
            arguments=arguments,
            # Actions keep the hash they had before other kinds existed: runs waiting on
            # one must still match the decisions people send them.
            action_hash=action_hash(tool if kind == "action" else f"{kind}:{tool}", arguments),
            required_role=policy.role_for(tool),
            approvers=policy.approvers,
            tenant=self.spec.tenant,
            requested_at=now,
            expires_at=now + timedelta(seconds=policy.timeout_seconds),
            parameters=parameters,
            risk=risk,
        )

    def _approval_record(
        self, pending: PendingApproval, decision: ApproveInput | RejectInput | None
    ) -> ApprovalRecord:
        expired = ApprovalRecord(
            kind=pending.kind,
            approval_id=pending.approval_id,
            tool=pending.tool,
            proposed_arguments=pending.arguments,
            decision="expired",
            reason="no decision in time",
            requested_at=pending.requested_at,
            decided_at=workflow.now(),
        )
        if isinstance(decision, ApproveInput):
            return expired.model_copy(
                update={
                    "decision": "approved",
                    "by": decision.by,
                    "role": decision.role,
                    "edit": decision.edit or None,  # only an edit that changed something
                    "reason": None,
                    "final_arguments": {**pending.arguments, **(decision.edit or {})},
                    "key_id": decision.signature.key_id if decision.signature else None,
                }
            )
        if isinstance(decision, RejectInput):
            return expired.model_copy(
                update={
                    "decision": "rejected",
                    "by": decision.by,
                    "role": decision.role,
                    "reason": decision.reason,
                    "key_id": decision.signature.key_id if decision.signature else None,
                }
            )
        return expired

    def _check_decision(
        self, action: str, by: str, role: str, tenant: str | None, edit: JsonDict | None = None
    ) -> None:
        """Refuse, with a reason a person can act on, any decision that does not fit,
        including an edit the run could not apply (checked here, so it never reaches it)."""
        pending = self.progress.pending_approval
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )
        if pending is None or self.progress.decision is not None:
            status = self.progress.status.value
            raise ApplicationError(
                f"run {self.run_id} is not waiting for an approval (status {status})"
            )
        if action != pending.action_hash:
            raise ApplicationError(
                f"stale approval: the pending action is {pending.action_hash} "
                f"({pending.tool}), not {action}; run `status` and decide again"
            )
        if tenant is not None and tenant != pending.tenant:
            raise ApplicationError(f"run {self.run_id} belongs to another tenant")
        if role != pending.required_role:
            raise ApplicationError(
                f"{by} has role {role!r}, but {pending.tool} needs role {pending.required_role!r}"
            )
        if pending.approvers and by not in pending.approvers:
            raise ApplicationError(f"{by} is not among the approvers for this run")
        if workflow.now() >= pending.expires_at:
            raise ApplicationError(f"the approval expired at {pending.expires_at.isoformat()}")
        if edit:
            check_edit(pending, edit)

    def _check_signature(self, input: ApproveInput | RejectInput) -> None:
        """Refuse a decision whose signature the run's policy does not accept (unsigned when
        keys are configured, forged, for another run or approval, replayed, expired, of the
        wrong role or tenant), recording the refusal where `status` shows it."""
        pending = self.progress.pending_approval
        assert pending is not None
        decided = [a.approval_id for a in self.progress.approvals]
        try:
            approval_signatures.check(
                self.spec.approval, self.run_id, pending, decided, input, workflow.now()
            )
        except approval_signatures.SignatureRefused as err:
            self._refuse(input, str(err))
            raise ApplicationError(f"refused and recorded: {err}") from None

    def _refuse(self, input: ApproveInput | RejectInput, reason: str) -> None:
        pending = self.progress.pending_approval
        refusal = RefusedDecision(
            approval_id=input.signature.approval_id
            if input.signature
            else (pending.approval_id if pending else None),
            by=bounds.recorded(input.by) or "",
            reason=bounds.recorded(reason) or "",
            at=workflow.now(),
        )
        # The last few are enough to say why nothing happened; all are in the events.
        self.progress.refusals = [*self.progress.refusals[-(MAX_REFUSALS - 1) :], refusal]
        self.recorder.event(
            EventType.APPROVAL_REFUSED, data={"by": refusal.by, "reason": refusal.reason}
        )

    async def decide_by_update(self, input: ApproveInput | RejectInput) -> DecisionResult:
        # Two updates can both pass validation in one activation; only the first decides.
        self._check_decision(*decision_fields(input))
        self._check_signature(input)
        assert self.progress.pending_approval is not None
        approval_id = self.progress.pending_approval.approval_id
        self.progress.decision = input
        await workflow.wait_condition(
            lambda: (
                self.progress.pending_approval is None
                or self.progress.pending_approval.approval_id != approval_id
            )
        )
        last = self.progress.approvals[-1] if self.progress.approvals else None
        # The run can end (a cancel) before it applies the decision: then it was not.
        decided = last.decision if last and last.approval_id == approval_id else "abandoned"
        return DecisionResult(
            approval_id=approval_id, decision=decided, status=self.progress.status
        )

    def validate(self, input: ApproveInput | RejectInput) -> None:
        """An update's validator: refuse, without recording, a decision that does not fit."""
        check_bounds(input)
        self._check_decision(*decision_fields(input))

    def decide_by_signal(self, input: ApproveInput | RejectInput) -> None:
        """A signal cannot be refused, so one that does not fit is recorded and ignored."""
        try:
            check_bounds(input)
            self._check_decision(*decision_fields(input))
        except ApplicationError as err:
            self._refuse(input, err.message)
            return
        try:
            self._check_signature(input)
        except ApplicationError:
            return
        self.progress.decision = input
