"""The checks an answer must pass before the run (or a session's turn) completes with it.

A component of AgentRunWorkflow. Checks that are computation only ride with the model call
(its activity returns their verdict with a final answer); otherwise a verify step runs them,
with a judge model if the spec names one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

from agentledger.workflows.recording import RunContext

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core.results import VerifyResult
    from agentledger.core.states import StepStatus
    from agentledger.core.wire import VerifyInput
    from agentledger.workflows import policies


class AnswerChecks:
    """The run's checks of an answer, and the verify steps that run them."""

    def __init__(self, run: RunContext) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        self.charge = run.charge

    def _tools_used(self) -> list[str]:
        """Tools that ran: the checks each declares on the answer apply too."""
        steps = self.progress.steps
        return sorted({s.name for s in steps if s.type == "tool_call" and s.status == "completed"})

    def for_reply(self) -> dict[str, Any]:
        """What a model call carries so that, should its reply be a final answer, it returns
        the checks' verdict: the checks when they are computation only (no judge)."""
        if self.spec.verify.judge is not None:
            return {}
        return {"checks": self.spec.verify, "tools_used": self._tools_used()}

    async def verify(self, answer: str, checked: VerifyResult | None) -> VerifyResult:
        """The answer's checks: the verdict the model call returned with the answer (its
        activity ran them), or a verify activity's."""
        async with self.recorder.step("verify", "checks") as step:
            verdict = checked if checked is not None else await self._check_answer(step.id, answer)
            self.progress.verification = verdict
            self.progress.spend(
                verdict.usage.input_tokens, verdict.usage.output_tokens, verdict.cost_usd
            )
            step.end(
                StepStatus.PASSED if verdict.passed else StepStatus.FAILED,
                output=verdict.model_dump(mode="json"),
                tokens_in=verdict.usage.input_tokens,
                tokens_out=verdict.usage.output_tokens,
                cost_usd=verdict.cost_usd,
            )
        return verdict

    async def _check_answer(self, step_id: str, answer: str) -> VerifyResult:
        """`verify.check`'s verdict on the answer."""
        check = VerifyInput(
            run_id=self.run_id,
            step_id=step_id,
            answer=answer,
            spec=self.spec.verify,
            tools_used=self._tools_used(),
            charge=self.charge,
        )
        timeout = timedelta(seconds=60)
        retry = policies.retry_policy(self.spec, self.spec.timeouts.max_attempts)
        summary = f"verify the answer ({len(answer):,} characters)"
        if self.spec.verify.judge is None:
            # Checks that are computation only (no judge, no I/O) run as a local activity,
            # inside the workflow task that asks for them: no task to dispatch and no task to
            # take the verdict, for the same record in history (a marker).
            verdict: VerifyResult = await workflow.execute_local_activity(
                names.ACTIVITY_VERIFY_CHECK,
                check,
                result_type=VerifyResult,
                start_to_close_timeout=timeout,
                retry_policy=retry,
                summary=summary,
            )
            return verdict
        judged: VerifyResult = await workflow.execute_activity(
            names.ACTIVITY_VERIFY_CHECK,
            check,
            result_type=VerifyResult,
            start_to_close_timeout=timeout,
            retry_policy=retry,
            summary=summary,
        )
        return judged
