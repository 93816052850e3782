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

from agentledger.workflows.changes import Changes
from agentledger.workflows.recording import RunContext, approval_input
from agentledger.workflows.run_state import RunEnded
from agentledger.workflows.steps import Step

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from agentledger.activities.standing import StandingActivities
    from agentledger.core import approval_signatures, bounds, fairness, merge_patch
    from agentledger.core.argument_schema import argument_problems, unknown_fields
    from agentledger.core.events import EventType
    from agentledger.core.identity import Identity
    from agentledger.core.keys import action_hash
    from agentledger.core.results import (
        ApprovalKind,
        ApprovalRecord,
        ApprovalVote,
        DecisionResult,
        PendingApproval,
        RefusedDecision,
    )
    from agentledger.core.spec import Budget, JsonDict
    from agentledger.core.standing_approvals import (
        StandingApproval,
        StandingFound,
        StandingInput,
    )
    from agentledger.core.states import RunStatus, StepStatus, is_terminal
    from agentledger.core.wire import ApproveInput, RejectInput
    from agentledger.workflows import policies


def check_bounds(input: ApproveInput | RejectInput) -> None:
    """Refuse a decision with a field over its maximum (agentledger.core.bounds): checked first,
    so nothing of it is recorded (a signal's refusal is recorded once, cut short)."""
    found = bounds.problems(input)
    if found:
        raise ApplicationError(f"decision refused: {'; '.join(found[:5])}")


def edited_arguments(
    pending: PendingApproval, decision: ApproveInput, merge_patches: bool
) -> JsonDict:
    """The arguments an approval leaves a call with: a replacement whole, a merge patch
    merged in, or, for runs before merge patches, the edit laid over member by member."""
    if decision.replace is not None:
        return decision.replace
    if not decision.edit:
        return pending.arguments
    if merge_patches:
        merged: JsonDict = merge_patch.apply(pending.arguments, decision.edit)
        return merged
    return {**pending.arguments, **decision.edit}


def check_edit(pending: PendingApproval, decision: ApproveInput, merge_patches: bool) -> None:
    """An edit must be one the run can apply to this kind of approval, and leave arguments
    the tool accepts."""
    edit, replace = decision.edit, decision.replace
    if edit is not None and replace is not None:
        raise ApplicationError(
            "send an edit (a JSON Merge Patch of the arguments) or a replacement (the whole "
            "arguments), not both"
        )
    if not edit and replace is None:
        return
    if pending.kind == "budget":
        if replace is not None:
            raise ApplicationError(
                "a budget takes an edit of max_tokens and/or max_cost_usd, not a replacement"
            )
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
        if merge_patches or replace is not None:
            final = edited_arguments(pending, decision, merge_patches)
            found = unknown_fields(pending.parameters, final) or argument_problems(
                pending.parameters, final
            )
        else:
            assert edit is not None
            found = unknown_fields(pending.parameters, edit) or argument_problems(
                pending.parameters, {**pending.arguments, **edit}
            )
        if found:
            raise ApplicationError(
                f"invalid edit of {pending.tool}'s arguments ({'; '.join(found)}): the tool "
                "would refuse them; approve with arguments it accepts, or reject"
            )


def decider_ref(decision: ApproveInput | RejectInput) -> str:
    """Who decides, compared: the identity the sender's credential (or the signature) proved,
    else, from a sender that names none, the name it gives."""
    return decision.decider.ref if decision.decider is not None else f"by:{decision.by}"


# Refused decisions a run keeps in its state for `status`.
MAX_REFUSALS = 10
STANDING_TIMEOUT = timedelta(seconds=30)


class Approvals:
    """People's decisions a run waits for, and the checks a decision must pass first."""

    def __init__(
        self,
        run: RunContext,
        tell_parent: Callable[[PendingApproval | None], Awaitable[None]],
        changes: Changes,
    ) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        # A sub-agent's run tells its parent of the approval it waits for (Subagents).
        self.tell_parent = tell_parent
        # An edit is a merge patch from generation 6 on; before, it was laid over member by
        # member (agentledger.core.version_branches: generation-6). Standing approvals
        # are looked up from generation 6 on too, for a tenant whose policy lets approvers
        # grant them.
        self.merge_patches = changes.generation_6
        self.standing = changes.generation_6

    async def approval_step(
        self,
        tool: str,
        arguments: JsonDict,
        parameters: JsonDict | None = None,
        risk: str | None = None,
        *,
        summary: str | None = None,
    ) -> JsonDict | None:
        """A risky call waits for a person (unless a standing approval covers it); returns
        the arguments to run, or None."""
        rule = await self._standing_rule(tool, arguments)
        if rule is not None:
            return await self._approved_by_rule(rule, tool, arguments, summary)
        record = await self.await_human(
            "action", tool, arguments, parameters=parameters, risk=risk, summary=summary
        )
        if record.decision == "approved":
            return record.final_arguments
        if record.decision == "expired":
            raise RunEnded(RunStatus.FAILED, f"approval for {tool} expired unanswered")
        if self.spec.approval.on_reject == "cancel":
            raise RunEnded(RunStatus.CANCELLED, f"approval for {tool} rejected: {record.reason}")
        self.recorder.set_status(RunStatus.PLANNING)
        return None

    async def _standing_rule(self, tool: str, arguments: JsonDict) -> StandingApproval | None:
        """The tenant's standing approval that covers this call, if its policy lets one:
        never for a tool it (or the run's policy) always asks about, a call that needs more
        than one approver, or a run whose decisions must be signed."""
        policy, asked = self.spec.tenant_policy, self.spec.approval
        if not self.standing or policy is None or not policy.standing_tools:
            return None
        if not policy.may_grant(tool) or tool in asked.always or asked.signatures_required():
            return None
        if asked.approvers_for(tool, arguments) > 1:
            return None
        found: StandingFound = await workflow.execute_activity_method(
            StandingActivities.find,
            StandingInput(tenant=self.spec.tenant, tool=tool),
            start_to_close_timeout=STANDING_TIMEOUT,
            retry_policy=fairness.MIRROR_RETRY,  # retried until Postgres answers
        )
        role, now = asked.role_for(tool, arguments), workflow.now()
        requester = self.spec.requester
        for rule in found.rules:
            if not rule.covers(
                tool,
                arguments,
                run_id=self.run_id,
                agent=self.spec.agent,
                required_role=role,
                at=now,
            ):
                continue
            if asked.approvers and rule.granted_by.name not in asked.approvers:
                continue
            own = requester is not None and rule.granted_by.ref == requester.ref
            if own and not asked.requester_may_approve:
                continue
            return rule
        return None

    async def _approved_by_rule(
        self, rule: StandingApproval, tool: str, arguments: JsonDict, summary: str | None
    ) -> JsonDict:
        """The call approved by a standing approval: an approval step decided at once, its
        record naming the rule and who granted it."""
        role = self.spec.approval.role_for(tool, arguments)
        input = {"kind": "action", "arguments": arguments, "required_role": role}
        async with self.recorder.step("approval", tool, input=input, moves_status=False) as step:
            now = workflow.now()
            record = ApprovalRecord(
                approval_id=step.id,
                tool=tool,
                proposed_arguments=arguments,
                decision="approved",
                by=rule.granted_by.name,
                role=role,
                final_arguments=arguments,
                requested_at=now,
                decided_at=now,
                decider=rule.granted_by,
                summary=summary,
                standing_rule=f"{rule.rule_id}: {rule.text()}",
            )
            self.progress.approvals.append(record)
            step.end(StepStatus.APPROVED, output=record.model_dump(mode="json"), finished_at=now)
        self.recorder.event(
            EventType.decided("approved"),
            step.id,
            {"by": record.by, "kind": "action", "standing_rule": record.standing_rule},
        )
        return arguments

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
        summary: str | None = None,
    ) -> ApprovalRecord:
        """Wait, holding no worker, for people's decision (as many approvals as the call
        needs), or for the approval to expire."""
        policy = self.spec.approval
        async with self.recorder.step("approval", tool) as step:
            pending = self._pending(step, kind, tool, arguments, reason, parameters, risk, summary)
            self.progress.pending_approval, self.progress.decision = pending, None
            self.recorder.show_details()  # the Web UI names what the run waits for
            step.input = approval_input(pending)
            self.recorder.event(
                EventType.APPROVAL_REQUESTED, step.id, pending.model_dump(mode="json")
            )
            step.report(StepStatus.WAITING)
            await self.recorder.flush()
            await self.tell_parent(pending)  # a sub-agent's run: its parent shows the approval
            wait = timedelta(seconds=policy.timeout_seconds)
            while True:
                try:
                    await workflow.wait_condition(
                        lambda: self.progress.decision is not None, timeout=wait
                    )
                except TimeoutError:
                    break
                if not self._count_vote(step.id):
                    break
                # One approval of several: shown as it stands, then the next is awaited.
                await self.recorder.flush()
                await self.tell_parent(self.progress.pending_approval)
                wait = max(pending.expires_at - workflow.now(), timedelta(0))
            decision, asked = self.progress.decision, self.progress.pending_approval
            self.progress.decision, self.progress.pending_approval = None, None
            # Recorded before anything awaits: the update that sent the decision answers with
            # what is recorded once the approval is no longer pending (`decide_by_update`).
            assert asked is not None
            record = self._approval_record(asked, decision, proposed=arguments)
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

    def _count_vote(self, step_id: str) -> bool:
        """An approval that is not the last one the call needs: counted on the pending
        approval (an edit restarts the count with it: the others approved other arguments);
        False for a decision that settles the approval."""
        decision, pending = self.progress.decision, self.progress.pending_approval
        assert pending is not None
        if not isinstance(decision, ApproveInput):
            return False
        if len(pending.votes) + 1 >= pending.approvals_needed:
            return False
        arguments = (
            edited_arguments(pending, decision, self.merge_patches)
            if pending.kind == "action"
            else pending.arguments
        )
        edited = arguments != pending.arguments
        vote = ApprovalVote(
            by=decision.by,
            decider=decision.decider,
            role=decision.role,
            at=workflow.now(),
            key_id=decision.signature.key_id if decision.signature else None,
            edit=(decision.replace if decision.replace is not None else decision.edit)
            if edited
            else None,
            edit_kind=("replace" if decision.replace is not None else "merge_patch")
            if edited
            else None,
        )
        if edited:
            pending = pending.model_copy(
                update={
                    "arguments": arguments,
                    "action_hash": action_hash(pending.tool, arguments),
                    "votes": [vote],
                }
            )
        else:
            pending = pending.model_copy(update={"votes": [*pending.votes, vote]})
        self.progress.pending_approval, self.progress.decision = pending, None
        self.recorder.show_details()
        # The approval as it now stands: the inbox reads a waiting step's latest.
        self.recorder.event(EventType.APPROVAL_COUNTED, step_id, pending.model_dump(mode="json"))
        return True

    def _pending(
        self,
        step: Step,
        kind: ApprovalKind,
        tool: str,
        arguments: JsonDict,
        reason: str | None,
        parameters: JsonDict | None,
        risk: str | None = None,
        summary: str | None = None,
    ) -> PendingApproval:
        """What people are asked to decide at `step`, under the run's approval policy."""
        policy = self.spec.approval
        now = workflow.now()
        call = arguments if kind == "action" else None  # rules judge tool calls alone
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
            required_role=policy.role_for(tool, call),
            approvers=policy.approvers,
            tenant=self.spec.tenant,
            requested_at=now,
            expires_at=now + timedelta(seconds=policy.timeout_seconds),
            parameters=parameters,
            risk=risk,
            approvals_needed=policy.approvers_for(tool, call)
            if call is not None
            else policy.approvals_needed,
            requester=self.spec.requester,
            summary=summary,
        )

    def _approval_record(
        self,
        pending: PendingApproval,
        decision: ApproveInput | RejectInput | None,
        *,
        proposed: JsonDict,
    ) -> ApprovalRecord:
        expired = ApprovalRecord(
            kind=pending.kind,
            approval_id=pending.approval_id,
            tool=pending.tool,
            proposed_arguments=proposed,
            decision="expired",
            reason="no decision in time",
            requested_at=pending.requested_at,
            decided_at=workflow.now(),
            votes=pending.votes,
            summary=pending.summary,
        )
        if decision is None:
            return expired
        decided = expired.model_copy(
            update={
                "by": decision.by,
                "role": decision.role,
                "key_id": decision.signature.key_id if decision.signature else None,
                "decider": decision.decider,
            }
        )
        if isinstance(decision, RejectInput):
            return decided.model_copy(update={"decision": "rejected", "reason": decision.reason})
        if not self.merge_patches:
            return decided.model_copy(
                update={
                    "decision": "approved",
                    "edit": decision.edit or None,  # only an edit that changed something
                    "reason": None,
                    "final_arguments": {**pending.arguments, **(decision.edit or {})},
                }
            )
        if pending.kind != "action":
            return decided.model_copy(
                update={
                    "decision": "approved",
                    "edit": decision.edit or None,
                    "edit_kind": "merge_patch" if decision.edit else None,
                    "reason": None,
                    "final_arguments": pending.arguments,
                }
            )
        final = edited_arguments(pending, decision, self.merge_patches)
        changed = final != pending.arguments
        return decided.model_copy(
            update={
                "decision": "approved",
                "reason": None,
                "final_arguments": final,
                # Exactly what was sent, when it changed something: a replacement or a patch.
                "edit": (decision.replace if decision.replace is not None else decision.edit)
                if changed
                else None,
                "edit_kind": ("replace" if decision.replace is not None else "merge_patch")
                if changed
                else None,
                "diff": merge_patch.between(proposed, final) if final != proposed else None,
            }
        )

    def _check_decision(self, input: ApproveInput | RejectInput) -> None:
        """Refuse, with a reason a person can act on, any decision that does not fit,
        including an edit the run could not apply (checked here, so it never reaches it)."""
        pending = self.progress.pending_approval
        by, role = input.by, input.role
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )
        if pending is None or self.progress.decision is not None:
            status = self.progress.status.value
            raise ApplicationError(
                f"run {self.run_id} is not waiting for an approval (status {status})"
            )
        if input.action_hash != pending.action_hash:
            raise ApplicationError(
                f"stale approval: the pending action is {pending.action_hash} "
                f"({pending.tool}), not {input.action_hash}; run `status` and decide again"
            )
        if input.tenant is not None and input.tenant != pending.tenant:
            raise ApplicationError(f"run {self.run_id} belongs to another tenant")
        if role != pending.required_role:
            raise ApplicationError(
                f"{by} has role {role!r}, but {pending.tool} needs role {pending.required_role!r}"
            )
        if pending.approvers and by not in pending.approvers:
            raise ApplicationError(f"{by} is not among the approvers for this run")
        if workflow.now() >= pending.expires_at:
            raise ApplicationError(f"the approval expired at {pending.expires_at.isoformat()}")
        if isinstance(input, ApproveInput):
            self._check_people(input)
            check_edit(pending, input, self.merge_patches)
            last = len(pending.votes) + 1 >= pending.approvals_needed
            if input.edit and pending.kind != "action" and not last:
                raise ApplicationError(
                    f"an edit of a {pending.kind} comes with its last approval: approve without one"
                )

    def _check_people(self, input: ApproveInput) -> None:
        """Who may approve: not whoever asked for the run (unless the policy lets them), and
        each of several approvals by another person."""
        pending = self.progress.pending_approval
        assert pending is not None
        requester, decider = pending.requester, input.decider
        if (
            not self.spec.approval.requester_may_approve
            and requester is not None
            and decider is not None
            and decider.ref == requester.ref
            and decider.kind != "operator"  # the single-user escape hatch: one operator
        ):
            raise ApplicationError(
                f"{decider.name} asked for this run, and its tenant's policy lets no one "
                f"approve their own run's calls: another approver in role "
                f"{pending.required_role!r} must"
            )
        ref = decider_ref(input)
        if any(
            (vote.decider.ref if vote.decider else f"by:{vote.by}") == ref for vote in pending.votes
        ):
            left = pending.approvals_needed - len(pending.votes)
            raise ApplicationError(
                f"{input.by} approved this call already; it needs {left} more approval(s) by "
                f"other people in role {pending.required_role!r}"
            )

    def _check_signature(self, input: ApproveInput | RejectInput) -> ApproveInput | RejectInput:
        """Refuse a decision whose signature the run's policy does not accept (unsigned when
        keys are configured, forged, for another run or approval, replayed, expired, of the
        wrong role or tenant), recording the refusal where `status` shows it. A signed
        decision is the signer's: its identity is the key's, whatever the sender said."""
        pending = self.progress.pending_approval
        assert pending is not None
        decided = [a.approval_id for a in self.progress.approvals]
        try:
            signer = approval_signatures.check(
                self.spec.approval, self.run_id, pending, decided, input, workflow.now()
            )
        except approval_signatures.SignatureRefused as err:
            self._refuse(input, str(err))
            raise ApplicationError(f"refused and recorded: {err}") from None
        if signer is None:
            return input
        signed = input.model_copy(
            update={"decider": Identity.of_approver(signer.key_id, signer.name)}
        )
        if isinstance(signed, ApproveInput):
            try:
                self._check_people(signed)
            except ApplicationError as err:
                self._refuse(input, err.message)
                raise ApplicationError(f"refused and recorded: {err.message}") from None
        return signed

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
        self._check_decision(input)
        input = self._check_signature(input)
        pending = self.progress.pending_approval
        assert pending is not None
        approval_id = pending.approval_id
        self.progress.decision = input
        await workflow.wait_condition(
            lambda: (
                self.progress.decision is not input
                or self.progress.pending_approval is None
                or self.progress.pending_approval.approval_id != approval_id
            )
        )
        now = self.progress.pending_approval
        if now is not None and now.approval_id == approval_id and self.progress.decision is None:
            left = now.approvals_needed - len(now.votes)
            return DecisionResult(
                approval_id=approval_id,
                decision="counted",
                status=self.progress.status,
                note=f"approval {len(now.votes)} of {now.approvals_needed} counted: {left} "
                f"more by other people in role {now.required_role!r} before {now.tool} runs",
            )
        last = self.progress.approvals[-1] if self.progress.approvals else None
        # The run can end (a cancel) before it applies the decision: then it was not.
        decided = last.decision if last and last.approval_id == approval_id else "abandoned"
        return DecisionResult(
            approval_id=approval_id,
            decision=decided,
            status=self.progress.status,
            final_arguments=last.final_arguments if last and decided == "approved" else None,
        )

    def validate(self, input: ApproveInput | RejectInput) -> None:
        """An update's validator: refuse, without recording, a decision that does not fit."""
        check_bounds(input)
        self._check_decision(input)

    def decide_by_signal(self, input: ApproveInput | RejectInput) -> None:
        """A signal cannot be refused, so one that does not fit is recorded and ignored."""
        try:
            check_bounds(input)
            self._check_decision(input)
        except ApplicationError as err:
            self._refuse(input, err.message)
            return
        try:
            input = self._check_signature(input)
        except ApplicationError:
            return
        self.progress.decision = input
