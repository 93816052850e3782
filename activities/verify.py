"""`verify.check`: deterministic checks a final answer must pass before a run completes."""

from __future__ import annotations

from temporalio import activity

from agentrun.constants import ACTIVITY_VERIFY_CHECK
from agentrun.models import CheckOutcome, VerifyInput, VerifyResult


class VerifyActivities:
    @activity.defn(name=ACTIVITY_VERIFY_CHECK)
    async def check(self, input: VerifyInput) -> VerifyResult:
        answer, spec = input.answer, input.spec
        checks = [
            CheckOutcome(
                name="min_chars",
                passed=len(answer.strip()) >= spec.min_chars,
                detail=f"answer has {len(answer.strip())} characters, needs {spec.min_chars}",
            )
        ]
        checks += [
            CheckOutcome(
                name=f"has section {section!r}",
                passed=section.lower() in answer.lower(),
                detail=f"the answer must contain {section!r}",
            )
            for section in spec.required_sections
        ]
        checks += [
            CheckOutcome(
                name=f"no {word!r}",
                passed=word not in answer,
                detail=f"the answer must not contain {word!r}",
            )
            for word in spec.forbidden
        ]
        return VerifyResult(passed=all(c.passed for c in checks), checks=checks)
